use tower_layer::Layer;

use crate::{policy::Policy, priority::MAX_URGENCY, PriorityService};

/// A [`Layer`] that applies an RFC 9218 priority policy to requests and responses.
///
/// For every request the service
///
/// 1. determines the client's priority from the request `priority` header(s) (or, when
///    nested inside another `PriorityLayer`, starts from the priority that layer decided);
/// 2. applies this layer's policy and inserts the effective [`Priority`](crate::Priority)
///    into the request extensions, where handlers can read it;
/// 3. writes the parameters the server *pinned*, and only those, into the response
///    `priority` header (RFC 9218 §5): `u=0`, `i`, `i=?0`, `u=0, i`, … There is no header
///    when nothing is pinned, and a `priority` header the handler set itself is left as is.
///
/// `PriorityLayer::new()` follows the client. Nested layers compose: an inner layer (closer
/// to the handler) overrides an outer one for the parameters it pins, and the outer layer's
/// pins still apply to the parameters the inner one leaves open.
///
/// The builder methods panic on invalid values (urgency above 7, an empty clamp range):
/// those are programming errors, found at configuration time. Requests never cause a panic.
///
/// ```
/// use axum::{routing::get, Router};
/// use tower_priority::PriorityLayer;
///
/// let app: Router = Router::new()
///     .route("/critical", get(|| async { "now" }).layer(PriorityLayer::new().urgency(0)))
///     .route("/video", get(|| async { "..." }).layer(PriorityLayer::new().incremental(true)))
///     .route("/", get(|| async { "index" }))
///     .layer(PriorityLayer::new().clamp_urgency(0, 6));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PriorityLayer {
    pub(crate) policy: Policy,
}

impl PriorityLayer {
    /// A layer that follows the client's signals and pins nothing.
    ///
    /// It still inserts the client's [`Priority`](crate::Priority) into request extensions.
    ///
    /// ```
    /// use tower_priority::PriorityLayer;
    /// let layer = PriorityLayer::new();
    /// assert_eq!(layer, PriorityLayer::default());
    /// ```
    pub fn new() -> Self {
        PriorityLayer {
            policy: Policy::default(),
        }
    }

    /// Pins the urgency: the client's urgency is replaced and the response announces `u=N`.
    ///
    /// An explicitly pinned urgency takes precedence over
    /// [`clamp_urgency`](Self::clamp_urgency) in the same layer.
    ///
    /// # Panics
    ///
    /// When `urgency` is above 7.
    ///
    /// ```
    /// use tower_priority::PriorityLayer;
    /// let critical = PriorityLayer::new().urgency(0);
    /// ```
    #[must_use]
    #[track_caller]
    pub fn urgency(mut self, urgency: u8) -> Self {
        assert!(
            urgency <= MAX_URGENCY,
            "PriorityLayer::urgency: urgency must be in 0..=7 (RFC 9218 §4.1), got {urgency}"
        );
        self.policy.urgency = Some(urgency);
        self
    }

    /// Pins the incremental flag: the response announces `i` (true) or `i=?0` (false).
    ///
    /// ```
    /// use tower_priority::PriorityLayer;
    /// let streaming = PriorityLayer::new().urgency(4).incremental(true);
    /// ```
    #[must_use]
    pub fn incremental(mut self, incremental: bool) -> Self {
        self.policy.incremental = Some(incremental);
        self
    }

    /// Keeps the client's urgency within `min..=max`.
    ///
    /// The response announces the range as `u-range=(MIN MAX)` in its `priority` header
    /// (an extension member that RFC 9218 recipients ignore), preceded by `u=N` when the
    /// clamp changed the client's urgency. `tls-flush` reads the range back, so a client
    /// that later asks for another urgency with a PRIORITY_UPDATE frame stays inside it.
    /// An explicit [`urgency`](Self::urgency) in the same layer wins over the clamp.
    ///
    /// # Panics
    ///
    /// When `min > max` or `max` is above 7.
    ///
    /// ```
    /// use tower_priority::PriorityLayer;
    /// // Nobody gets to pre-empt the critical routes with u=0.
    /// let layer = PriorityLayer::new().clamp_urgency(1, 7);
    /// ```
    #[must_use]
    #[track_caller]
    pub fn clamp_urgency(mut self, min: u8, max: u8) -> Self {
        assert!(
            max <= MAX_URGENCY,
            "PriorityLayer::clamp_urgency: max must be in 0..=7 (RFC 9218 §4.1), got {max}"
        );
        assert!(
            min <= max,
            "PriorityLayer::clamp_urgency: min ({min}) must not be greater than max ({max})"
        );
        self.policy.clamp = Some((min, max));
        self
    }

    /// Disregards the client's signals and pins both parameters.
    ///
    /// The values are the defaults (`u=3`, `i=?0`) unless given with
    /// [`urgency`](Self::urgency) or [`incremental`](Self::incremental); a
    /// [`clamp_urgency`](Self::clamp_urgency) range applies to that starting value. Nested
    /// inside another `PriorityLayer`, it disregards that layer's decision too.
    ///
    /// ```
    /// use tower_priority::PriorityLayer;
    /// // The response always says `priority: u=6, i=?0`.
    /// let background = PriorityLayer::new().ignore_client().urgency(6);
    /// ```
    #[must_use]
    pub fn ignore_client(mut self) -> Self {
        self.policy.ignore_client = true;
        self
    }
}

impl<S> Layer<S> for PriorityLayer {
    type Service = PriorityService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PriorityService::new(inner, *self)
    }
}
