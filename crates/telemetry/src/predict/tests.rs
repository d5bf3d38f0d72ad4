#![allow(clippy::unwrap_used)]

use proptest::prelude::*;

use super::*;
use crate::counters::ErrorKind;
use crate::media::MediaReading;

/// A one-second sample at `t_s` with `ops` reads at `mean_us` (p99 a bit above).
fn s(t_s: u64, ops: u64, mean_us: u64) -> Sample {
    Sample {
        t_ms: t_s * 1000,
        interval_ms: 1000,
        ops: [ops, 0, 0, 0],
        data_mean_us: mean_us,
        data_p99_us: mean_us + mean_us / 5,
        queue_depth_avg: ops as f64 * mean_us as f64 / 1e6,
        ..Sample::default()
    }
}

fn drive(name: &str, samples: Vec<Sample>) -> DriveSeries {
    DriveSeries {
        source: name.into(),
        group: Some("vol".into()),
        samples,
    }
}

/// Four members over 60 s; member `d2` gets `(ops, mean_us)` from `odd`.
fn volume(odd: impl Fn(u64) -> (u64, u64)) -> Vec<DriveSeries> {
    (0..4)
        .map(|i| {
            let name = format!("d{i}");
            drive(
                &name,
                (1..=60)
                    .map(|t| {
                        if i == 2 {
                            let (ops, us) = odd(t);
                            s(t, ops, us)
                        } else {
                            s(t, 1000, 400 + 10 * i)
                        }
                    })
                    .collect(),
            )
        })
        .collect()
}

fn grade_of(a: &[Assessment], name: &str) -> Grade {
    a.iter().find(|x| x.source == name).unwrap().grade
}

#[test]
fn healthy_volume_is_ok() {
    let a = assess(
        &PredictionConfig::default(),
        60_000,
        &volume(|_| (1000, 420)),
    );
    assert!(a.iter().all(|x| x.grade == Grade::Ok), "{a:?}");
}

#[test]
fn a_slow_member_at_the_same_load_is_failing() {
    let a = assess(
        &PredictionConfig::default(),
        60_000,
        &volume(|_| (1000, 4_000)),
    );
    assert_eq!(grade_of(&a, "d2"), Grade::Failing);
    let r = &a.iter().find(|x| x.source == "d2").unwrap().reasons[0];
    assert_eq!(r.rule, "fail_slow");
    assert!(
        r.detail.contains("slow in 60 of 60 samples"),
        "{}",
        r.detail
    );
    for d in ["d0", "d1", "d3"] {
        assert_eq!(grade_of(&a, d), Grade::Ok, "{d}");
    }
}

#[test]
fn a_member_slow_in_part_of_the_window_is_suspect() {
    let a = assess(
        &PredictionConfig::default(),
        60_000,
        &volume(|t| (1000, if t > 25 { 4_000 } else { 400 })),
    );
    assert_eq!(grade_of(&a, "d2"), Grade::Suspect);
}

#[test]
fn a_busy_member_is_not_flagged() {
    // Twice the operations of its peers and a deeper queue: its latency is its load's.
    let a = assess(
        &PredictionConfig::default(),
        60_000,
        &volume(|_| (2_500, 4_000)),
    );
    let d2 = a.iter().find(|x| x.source == "d2").unwrap();
    assert_eq!(d2.grade, Grade::Ok, "{d2:?}");
    assert!(d2.notes[0].starts_with("busy, not slow"), "{:?}", d2.notes);
}

#[test]
fn small_absolute_differences_and_idle_drives_are_not_flagged() {
    // 3x of 40 µs is not worth a replacement.
    let c = PredictionConfig::default();
    let v: Vec<DriveSeries> = (0..4)
        .map(|i| {
            drive(
                &format!("d{i}"),
                (1..=60)
                    .map(|t| s(t, 1000, if i == 2 { 150 } else { 40 }))
                    .collect(),
            )
        })
        .collect();
    assert!(assess(&c, 60_000, &v).iter().all(|x| x.grade == Grade::Ok));
    // Too few operations to judge.
    let a = assess(&c, 60_000, &volume(|_| (5, 40_000)));
    assert_eq!(grade_of(&a, "d2"), Grade::Ok);
}

#[test]
fn errors_grade_by_recurrence() {
    let c = PredictionConfig::default();
    let mut one = volume(|_| (1000, 420));
    one[1].samples[10].errors[ErrorKind::Media as usize] = 1;
    one[3].samples[10].errors[ErrorKind::Transport as usize] = 2;
    let a = assess(&c, 60_000, &one);
    assert_eq!(grade_of(&a, "d1"), Grade::Suspect);
    assert_eq!(grade_of(&a, "d3"), Grade::Suspect);
    for t in [20, 30] {
        one[1].samples[t].errors[ErrorKind::Media as usize] = 1;
    }
    for t in [11, 12, 13, 14] {
        one[3].samples[t].errors[ErrorKind::Transport as usize] = 1;
    }
    let a = assess(&c, 60_000, &one);
    assert_eq!(grade_of(&a, "d1"), Grade::Failing);
    assert_eq!(grade_of(&a, "d3"), Grade::Failing);
    // Out of the window: forgotten.
    let a = assess(&c, 200_000, &one);
    assert!(a.iter().all(|x| x.grade == Grade::Ok));
}

#[test]
fn spare_and_wear() {
    let c = PredictionConfig::default();
    let with = |spare: u8, used: u8| {
        let mut v = volume(|_| (1000, 420));
        for x in &mut v[0].samples {
            x.media = MediaReading {
                available_spare_pct: Some(spare),
                available_spare_threshold_pct: Some(10),
                percentage_used: Some(used),
                ..MediaReading::default()
            };
        }
        grade_of(&assess(&c, 60_000, &v), "d0")
    };
    assert_eq!(with(100, 3), Grade::Ok);
    assert_eq!(with(20, 3), Grade::Suspect);
    assert_eq!(with(9, 3), Grade::Failing);
    assert_eq!(with(100, 95), Grade::Suspect);
    assert_eq!(with(100, 100), Grade::Failing);
}

#[test]
fn smart_media_error_count_rising_counts() {
    let c = PredictionConfig::default();
    let mut v = volume(|_| (1000, 420));
    for (i, x) in v[0].samples.iter_mut().enumerate() {
        x.media.media_errors = Some(100 + i as u64 / 6);
    }
    let a = assess(&c, 60_000, &v);
    let d0 = a.iter().find(|x| x.source == "d0").unwrap();
    assert_eq!(d0.grade, Grade::Failing, "{}", d0.summary());
    assert!(
        d0.summary().contains("9 by the drive's SMART count"),
        "{}",
        d0.summary()
    );
}

fn arb_volume() -> impl Strategy<Value = Vec<DriveSeries>> {
    // 3..6 members, 30 samples each, latency 100 µs..20 ms, 0..3000 ops.
    (3usize..6).prop_flat_map(|n| {
        proptest::collection::vec(
            proptest::collection::vec((0u64..3000, 100u64..20_000), 30),
            n,
        )
        .prop_map(|members| {
            members
                .into_iter()
                .enumerate()
                .map(|(i, v)| {
                    drive(
                        &format!("d{i}"),
                        v.into_iter()
                            .enumerate()
                            .map(|(t, (ops, us))| s(t as u64 + 1, ops, us))
                            .collect(),
                    )
                })
                .collect()
        })
    })
}

proptest! {
    #[test]
    fn grades_do_not_depend_on_input_order(v in arb_volume()) {
        let c = PredictionConfig::default();
        let a = assess(&c, 30_000, &v);
        let mut r = v.clone();
        r.reverse();
        prop_assert_eq!(a, assess(&c, 30_000, &r));
    }

    #[test]
    fn equal_peers_are_never_slow(ops in 20u64..5000, us in 1u64..100_000, n in 3usize..8) {
        let v: Vec<DriveSeries> = (0..n)
            .map(|i| drive(&format!("d{i}"), (1..=60).map(|t| s(t, ops, us)).collect()))
            .collect();
        let a = assess(&PredictionConfig::default(), 60_000, &v);
        prop_assert!(a.iter().all(|x| x.grade == Grade::Ok));
    }

    #[test]
    fn a_member_with_more_load_than_load_ratio_is_never_fail_slow(
        v in arb_volume(),
        extra in 1.51f64..10.0,
    ) {
        // Give d0 more than 1.5x the busiest peer's operations in every sample.
        let mut v = v;
        for t in 0..30 {
            let top = v.iter().skip(1).map(|d| d.samples[t].ops[0]).max().unwrap_or(0);
            v[0].samples[t].ops[0] = ((top.max(20) as f64) * extra).ceil() as u64;
        }
        let a = assess(&PredictionConfig::default(), 30_000, &v);
        let d0 = a.iter().find(|x| x.source == "d0").unwrap();
        prop_assert!(d0.reasons.iter().all(|r| r.rule != "fail_slow"), "{:?}", d0);
    }

    #[test]
    fn more_errors_never_lower_a_grade(v in arb_volume(), at in 0usize..30, kind in 0usize..3) {
        let c = PredictionConfig::default();
        let before = grade_of(&assess(&c, 30_000, &v), "d0");
        let mut w = v.clone();
        w[0].samples[at].errors[kind] += 1;
        prop_assert!(grade_of(&assess(&c, 30_000, &w), "d0") >= before);
    }
}
