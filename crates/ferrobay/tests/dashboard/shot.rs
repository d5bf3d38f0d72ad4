//! A decoded screenshot and the checks the tests make on it: how much of a region has
//! a colour (a health badge), whether a chart has drawn lines above its floor.

use std::path::PathBuf;

/// An RGB(A) colour.
pub type Rgb = (u8, u8, u8);

/// The dashboard's state colours (style.css).
pub const GOOD: Rgb = (0x1a, 0x7f, 0x37);
pub const WARN: Rgb = (0xbf, 0x87, 0x00);
/// The chart palette's first colours (chart.js): the first two series.
pub const SERIES: [Rgb; 2] = [(0x2f, 0x81, 0xf7), (0xe1, 0x6f, 0x24)];

pub struct Shot {
    pub width: u32,
    pub height: u32,
    /// RGBA, row by row.
    rgba: Vec<u8>,
    pub path: PathBuf,
}

/// A region in screenshot pixels: x, y, width, height.
pub type Rect = (f64, f64, f64, f64);

impl Shot {
    pub fn decode(png_bytes: &[u8], path: PathBuf) -> Shot {
        let mut decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
        decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
        let mut reader = decoder.read_info().expect("PNG header");
        let mut buf = vec![0; reader.output_buffer_size().expect("PNG size")];
        let info = reader.next_frame(&mut buf).expect("PNG frame");
        buf.truncate(info.buffer_size());
        let rgba = match info.color_type {
            png::ColorType::Rgba => buf,
            png::ColorType::Rgb => buf
                .chunks_exact(3)
                .flat_map(|p| [p[0], p[1], p[2], 255])
                .collect(),
            other => panic!("{}: unexpected PNG colour type {other:?}", path.display()),
        };
        Shot {
            width: info.width,
            height: info.height,
            rgba,
            path,
        }
    }

    fn pixel(&self, x: u32, y: u32) -> Rgb {
        let i = ((y * self.width + x) * 4) as usize;
        (self.rgba[i], self.rgba[i + 1], self.rgba[i + 2])
    }

    /// The pixels of `r` (clipped to the image).
    fn pixels(&self, r: Rect) -> impl Iterator<Item = (u32, u32, Rgb)> + '_ {
        let x0 = r.0.max(0.0).floor() as u32;
        let y0 = r.1.max(0.0).floor() as u32;
        let x1 = ((r.0 + r.2).ceil() as u32).min(self.width);
        let y1 = ((r.1 + r.3).ceil() as u32).min(self.height);
        (y0..y1).flat_map(move |y| (x0..x1).map(move |x| (x, y, self.pixel(x, y))))
    }

    /// The share of `r`'s pixels within `tolerance` (per channel) of `colour`.
    pub fn share_of(&self, r: Rect, colour: Rgb, tolerance: u8) -> f64 {
        let (mut hit, mut all) = (0u64, 0u64);
        for (_, _, p) in self.pixels(r) {
            all += 1;
            if close(p, colour, tolerance) {
                hit += 1;
            }
        }
        if all == 0 {
            0.0
        } else {
            hit as f64 / all as f64
        }
    }

    /// Pixels of `r` in any of `colours`, and of those how many lie above the bottom
    /// `floor_px` rows of `r` (a line drawn above zero).
    pub fn line_pixels(&self, r: Rect, colours: &[Rgb], floor_px: f64) -> (u64, u64) {
        let floor_y = r.1 + r.3 - floor_px;
        let (mut any, mut above) = (0u64, 0u64);
        for (_, y, p) in self.pixels(r) {
            if colours.iter().any(|c| close(p, *c, 40)) {
                any += 1;
                if f64::from(y) < floor_y {
                    above += 1;
                }
            }
        }
        (any, above)
    }
}

fn close(a: Rgb, b: Rgb, tolerance: u8) -> bool {
    a.0.abs_diff(b.0) <= tolerance
        && a.1.abs_diff(b.1) <= tolerance
        && a.2.abs_diff(b.2) <= tolerance
}
