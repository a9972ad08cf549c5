//! `PriorityLayer` configuration: invalid values panic when the layer is built (with a clear
//! message), valid ones do not; the layer is a cheap, comparable value.

use tower_priority::PriorityLayer;

#[test]
#[should_panic(
    expected = "PriorityLayer::urgency: urgency must be in 0..=7 (RFC 9218 §4.1), got 8"
)]
fn urgency_above_7_panics() {
    let _ = PriorityLayer::new().urgency(8);
}

#[test]
#[should_panic(expected = "urgency must be in 0..=7")]
fn urgency_255_panics() {
    let _ = PriorityLayer::new().ignore_client().urgency(u8::MAX);
}

#[test]
#[should_panic(expected = "PriorityLayer::clamp_urgency: min (5) must not be greater than max (2)")]
fn clamp_min_above_max_panics() {
    let _ = PriorityLayer::new().clamp_urgency(5, 2);
}

#[test]
#[should_panic(
    expected = "PriorityLayer::clamp_urgency: max must be in 0..=7 (RFC 9218 §4.1), got 8"
)]
fn clamp_max_above_7_panics() {
    let _ = PriorityLayer::new().clamp_urgency(0, 8);
}

#[test]
fn valid_configurations_do_not_panic() {
    for u in 0..=7 {
        let _ = PriorityLayer::new().urgency(u);
        for max in u..=7 {
            let _ = PriorityLayer::new().clamp_urgency(u, max);
        }
    }
    let _ = PriorityLayer::new()
        .ignore_client()
        .urgency(7)
        .incremental(true)
        .clamp_urgency(0, 0);
}

#[test]
fn layer_is_clone_debug_default() {
    let layer = PriorityLayer::new().urgency(2).incremental(false);
    #[allow(clippy::clone_on_copy)]
    let copy = layer.clone();
    assert_eq!(copy, layer);
    assert_eq!(PriorityLayer::default(), PriorityLayer::new());
    assert_ne!(layer, PriorityLayer::new());
    assert!(format!("{layer:?}").contains("PriorityLayer"));
}
