//! Headless Chromium driven over WebDriver (chromedriver + fantoccini), as the dashboard's
//! tests need it: a fresh profile per browser, console messages read back, screenshots
//! saved for people under `target/dashboard-screenshots/` and decoded for the test.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::error::CmdError;
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use super::shot::Shot;

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The browser window (CSS pixels = screenshot pixels: device scale factor 1).
pub const WINDOW: (u32, u32) = (1400, 1500);
const DRIVER_START_TIMEOUT: Duration = Duration::from_secs(20);

/// What is missing to run a browser here, if anything.
pub fn missing() -> Option<String> {
    for (path, package) in [(CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")] {
        if !Path::new(path).exists() {
            return Some(format!(
                "{path} not found (Debian package {package}; scripts/install-deps.sh installs it)"
            ));
        }
    }
    None
}

/// One browser session; chromedriver (and with it Chromium) ends when this is dropped.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
    shots: PathBuf,
    step: u32,
}

/// chromedriver's `POST /session/{id}/se/log` (`{"type": "browser"}`): the console
/// messages since the last call, with their level and source.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/se/log",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(r#"{"type":"browser"}"#.to_string()),
        )
    }
}

/// A console message.
#[derive(Clone)]
pub struct LogEntry {
    pub level: String,
    pub source: String,
    pub message: String,
}

impl Browser {
    /// Starts chromedriver on a free port and opens a session with a fresh profile.
    /// `shots`: where this test's screenshots go (emptied first).
    pub async fn start(shots: PathBuf) -> Browser {
        let port = testkit::net::free_port().expect("free port");
        let mut cmd = Command::new(CHROMEDRIVER);
        cmd.arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        testkit::process::die_with_parent(&mut cmd);
        let mut driver = cmd.spawn().expect("start chromedriver");
        let deadline = Instant::now() + DRIVER_START_TIMEOUT;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not listen on {port}"
            );
            if let Ok(Some(s)) = driver.try_wait() {
                panic!("chromedriver exited at start ({s})");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir().expect("profile dir");
        let args = vec![
            "--headless".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--force-device-scale-factor=1".into(),
            format!("--window-size={},{}", WINDOW.0, WINDOW.1),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": CHROMIUM, "args": args },
            "goog:loggingPrefs": { "browser": "ALL" },
        });
        let caps = match caps {
            Value::Object(m) => m,
            _ => unreachable!("an object"),
        };
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("WebDriver session");
        let _ = std::fs::remove_dir_all(&shots);
        std::fs::create_dir_all(&shots).expect("screenshot dir");
        Browser {
            client,
            driver,
            _profile: profile,
            shots,
            step: 0,
        }
    }

    /// The console messages since the last call.
    pub async fn console(&self) -> Vec<LogEntry> {
        let v = self
            .client
            .issue_cmd(BrowserLog)
            .await
            .expect("browser log");
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|e| LogEntry {
                        level: e["level"].as_str().unwrap_or_default().to_string(),
                        source: e["source"].as_str().unwrap_or_default().to_string(),
                        message: e["message"].as_str().unwrap_or_default().to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Fails with every console error (and warning) since the last call.
    pub async fn assert_no_console_errors(&self, when: &str) {
        let bad: Vec<LogEntry> = self
            .console()
            .await
            .into_iter()
            .filter(|e| e.level == "SEVERE" || e.level == "WARNING")
            .collect();
        let lines: Vec<String> = bad
            .iter()
            .map(|e| format!("{} {}: {}", e.level, e.source, e.message))
            .collect();
        assert!(
            bad.is_empty(),
            "{when}: console errors:\n{}",
            lines.join("\n")
        );
    }

    /// A screenshot of the window, saved as `NN-name.png`, decoded.
    pub async fn screenshot(&mut self, name: &str) -> Shot {
        let png = self.client.screenshot().await.expect("screenshot");
        self.step += 1;
        let path = self.shots.join(format!("{:02}-{name}.png", self.step));
        std::fs::write(&path, &png).expect("save screenshot");
        Shot::decode(&png, path)
    }

    /// Waits until `script` (a function body returning a value) returns something
    /// truthy; returns that value. On timeout the message has the last value.
    pub async fn wait_js(&self, what: &str, script: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self
                .client
                .execute(script, vec![])
                .await
                .unwrap_or_else(|e| panic!("{what}: script failed: {e}"));
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::String(s) => !s.is_empty(),
                Value::Array(a) => !a.is_empty(),
                _ => true,
            };
            if truthy {
                return v;
            }
            if Instant::now() > deadline {
                let page = self
                    .client
                    .execute(
                        "return location.href + '\\n' + document.body.innerText.slice(0, 2000);",
                        vec![],
                    )
                    .await
                    .unwrap_or_default();
                panic!(
                    "{what}: not seen within {timeout:?} (last: {v}); the page:\n{}",
                    page.as_str().unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The text of the first element `css` finds.
    pub async fn text(&self, css: &str) -> String {
        self.on_element(css, |e| async move { e.text().await })
            .await
    }

    /// The rectangle (x, y, width, height) of the first element `css` finds, in page
    /// pixels (= screenshot pixels at scale 1, the page not scrolled). Read in one script
    /// call: the page redraws its tables every 2 s, which would stale a found element.
    pub async fn rect(&self, css: &str) -> (f64, f64, f64, f64) {
        let script = format!(
            "const e = document.querySelector({}); if (!e) return null; \
             const r = e.getBoundingClientRect(); return [r.x, r.y, r.width, r.height];",
            Value::String(css.to_string())
        );
        let v = self
            .client
            .execute(&script, vec![])
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"));
        let n = |i: usize| {
            v[i].as_f64()
                .unwrap_or_else(|| panic!("{css}: no element ({v})"))
        };
        (n(0), n(1), n(2), n(3))
    }

    /// Clicks the element `css`.
    pub async fn click(&self, css: &str) {
        self.on_element(css, |e| async move { e.click().await.map(|_| ()) })
            .await
    }

    /// Runs `action` on the first element `css` finds. The dashboard re-renders its tables
    /// on every refresh, so an element found just before a refresh can be gone when used:
    /// it is found again then (a few times).
    async fn on_element<T, F, Fut>(&self, css: &str, action: F) -> T
    where
        F: Fn(Element) -> Fut,
        Fut: std::future::Future<Output = Result<T, CmdError>>,
    {
        let mut attempts_left = 5;
        loop {
            let element = self
                .client
                .find(Locator::Css(css))
                .await
                .unwrap_or_else(|e| panic!("{css}: {e}"));
            match action(element).await {
                Ok(v) => return v,
                Err(e) if attempts_left > 0 && e.to_string().contains("stale element") => {
                    attempts_left -= 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("{css}: {e}"),
            }
        }
    }

    /// Replaces the value of the input `css` with `text`, as typed.
    pub async fn type_into(&self, css: &str, text: &str) {
        let e = self
            .client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"));
        e.clear()
            .await
            .unwrap_or_else(|e| panic!("clear {css}: {e}"));
        e.send_keys(text)
            .await
            .unwrap_or_else(|e| panic!("type into {css}: {e}"));
    }

    /// Scrolls the page to the top (screenshots then match element rectangles).
    pub async fn scroll_top(&self) {
        self.client
            .execute("window.scrollTo(0, 0); return true;", vec![])
            .await
            .expect("scroll");
    }

    /// Ends the session (Chromium exits), then chromedriver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        testkit::process::kill_if_running(&mut self.driver);
        // A test that panicked did not close the session: Chromium outlives its driver.
        // Its processes are the ones started with this browser's own profile dir.
        kill_chromium_of(self._profile.path());
    }
}

/// SIGKILLs, by pid, the processes whose command line names `profile` as user data dir.
fn kill_chromium_of(profile: &Path) {
    let flag = format!("--user-data-dir={}", profile.display());
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(p.path().join("cmdline")) else {
            continue;
        };
        if cmdline.split(|b| *b == 0).any(|a| a == flag.as_bytes()) {
            // By pid, as `kill` does; at worst it is gone already.
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Where screenshots of test `name` go: `<target dir>/dashboard-screenshots/<name>`.
pub fn shots_dir(name: &str) -> PathBuf {
    // The test binary is <target>/<profile>/deps/dashboard-<hash>.
    let exe = std::env::current_exe().expect("test binary path");
    let target = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("target dir");
    target.join("dashboard-screenshots").join(name)
}
