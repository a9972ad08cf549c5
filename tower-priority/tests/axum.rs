//! `PriorityLayer` in axum 0.8: per-route `.layer`, `route_layer`, `Router::layer`, nesting,
//! every policy, the request extension and the response header rules.

use axum::{
    body::Body,
    http::{header::HeaderValue, Request, StatusCode},
    response::IntoResponse,
    routing::get,
    Extension, Router,
};
use http_body_util::BodyExt;
use tower::ServiceExt;
use tower_priority::{Priority, PriorityLayer};

/// Echoes the effective priority the layer put into the extensions.
async fn echo(Extension(p): Extension<Priority>) -> String {
    p.to_string()
}

/// A handler without the extractor (so it also works on routes without the layer).
async fn plain() -> &'static str {
    "plain"
}

/// Sets its own `priority` header, which the layers must leave alone.
async fn own_header() -> impl IntoResponse {
    ([("priority", "u=7, i")], "own")
}

struct Reply {
    status: StatusCode,
    priority: Vec<String>,
    body: String,
}

async fn send(app: &Router, path: &str, client: &[&str]) -> Reply {
    let mut req = Request::get(path);
    for line in client {
        req = req.header("priority", *line);
    }
    let res = app
        .clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let priority = res
        .headers()
        .get_all("priority")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        priority,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

/// The single response `priority` header, or `None`; fails on duplicates.
fn header(reply: &Reply) -> Option<&str> {
    assert!(
        reply.priority.len() <= 1,
        "duplicate headers: {:?}",
        reply.priority
    );
    reply.priority.first().map(String::as_str)
}

#[tokio::test]
async fn per_route_policies() {
    let app = Router::new()
        .route(
            "/critical",
            get(echo).layer(PriorityLayer::new().urgency(0)),
        )
        .route(
            "/inc",
            get(echo).layer(PriorityLayer::new().incremental(true)),
        )
        .route(
            "/not-inc",
            get(echo).layer(PriorityLayer::new().incremental(false)),
        )
        .route(
            "/both",
            get(echo).layer(PriorityLayer::new().urgency(0).incremental(true)),
        )
        .route("/follow", get(echo).layer(PriorityLayer::new()))
        .route("/none", get(plain));

    let r = send(&app, "/critical", &["u=5, i"]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(header(&r), Some("u=0"));
    assert_eq!(
        r.body, "u=0, i",
        "urgency pinned, incremental from the client"
    );

    let r = send(&app, "/inc", &["u=5"]).await;
    assert_eq!(header(&r), Some("i"));
    assert_eq!(r.body, "u=5, i");

    let r = send(&app, "/not-inc", &["u=5, i"]).await;
    assert_eq!(header(&r), Some("i=?0"));
    assert_eq!(r.body, "u=5");

    let r = send(&app, "/both", &[]).await;
    assert_eq!(header(&r), Some("u=0, i"));
    assert_eq!(r.body, "u=0, i");

    // Nothing pinned: no header, but the handler still sees the client's priority.
    let r = send(&app, "/follow", &["u=6, i"]).await;
    assert_eq!(header(&r), None);
    assert_eq!(r.body, "u=6, i");

    // A route without the layer is untouched.
    let r = send(&app, "/none", &["u=6"]).await;
    assert_eq!(header(&r), None);
    assert_eq!(r.body, "plain");
}

#[tokio::test]
async fn extension_reflects_client_lines_and_malformed_input() {
    let app = Router::new().route("/", get(echo).layer(PriorityLayer::new()));
    assert_eq!(send(&app, "/", &[]).await.body, "u=3");
    assert_eq!(send(&app, "/", &["u=1", "i"]).await.body, "u=1, i");
    assert_eq!(send(&app, "/", &["u=1", "u=2, i=?0"]).await.body, "u=2");
    // Malformed signals are never an error response: defaults, 200.
    let r = send(&app, "/", &["u=1,,i"]).await;
    assert_eq!((r.status, r.body.as_str()), (StatusCode::OK, "u=3"));
    let r = send(&app, "/", &["u=9, i"]).await;
    assert_eq!((r.status, r.body.as_str()), (StatusCode::OK, "u=3, i"));
}

#[tokio::test]
async fn clamp_announces_its_range_and_any_value_it_changed() {
    let app = Router::new().route(
        "/",
        get(echo).layer(PriorityLayer::new().clamp_urgency(2, 5)),
    );

    // The range always travels (so tls-flush keeps clamping later PRIORITY_UPDATEs);
    // the clamped urgency only when the clamp changed the client's.
    let r = send(&app, "/", &["u=0, i"]).await;
    assert_eq!(header(&r), Some("u=2, u-range=(2 5)"));
    assert_eq!(r.body, "u=2, i");

    let r = send(&app, "/", &["u=7"]).await;
    assert_eq!(header(&r), Some("u=5, u-range=(2 5)"));
    assert_eq!(r.body, "u=5");

    for u in 2..=5 {
        let r = send(&app, "/", &[&format!("u={u}")]).await;
        assert_eq!(header(&r), Some("u-range=(2 5)"), "u={u} is in range");
        assert_eq!(r.body, format!("u={u}"));
    }

    // No client signal: the default u=3 is in range.
    assert_eq!(header(&send(&app, "/", &[]).await), Some("u-range=(2 5)"));

    // A range that excludes the default clamps (and pins) it too.
    let high = Router::new().route(
        "/",
        get(echo).layer(PriorityLayer::new().clamp_urgency(4, 7)),
    );
    let r = send(&high, "/", &[]).await;
    assert_eq!(header(&r), Some("u=4, u-range=(4 7)"));
    assert_eq!(r.body, "u=4");

    // An explicit urgency in the same layer wins over the clamp.
    let both = Router::new().route(
        "/",
        get(echo).layer(PriorityLayer::new().clamp_urgency(0, 2).urgency(6)),
    );
    assert_eq!(header(&send(&both, "/", &["u=1"]).await), Some("u=6"));
}

#[tokio::test]
async fn ignore_client_pins_both() {
    let app = Router::new()
        .route(
            "/default",
            get(echo).layer(PriorityLayer::new().ignore_client()),
        )
        .route(
            "/u6",
            get(echo).layer(PriorityLayer::new().ignore_client().urgency(6)),
        )
        .route(
            "/inc",
            get(echo).layer(PriorityLayer::new().incremental(true).ignore_client()),
        )
        .route(
            "/clamped",
            get(echo).layer(PriorityLayer::new().ignore_client().clamp_urgency(5, 7)),
        );

    let r = send(&app, "/default", &["u=0, i"]).await;
    assert_eq!(header(&r), Some("u=3, i=?0"));
    assert_eq!(r.body, "u=3");

    let r = send(&app, "/u6", &["u=0, i"]).await;
    assert_eq!(header(&r), Some("u=6, i=?0"));
    assert_eq!(r.body, "u=6");

    let r = send(&app, "/inc", &["u=0, i=?0"]).await;
    assert_eq!(header(&r), Some("u=3, i"));
    assert_eq!(r.body, "u=3, i");

    let r = send(&app, "/clamped", &["u=0"]).await;
    assert_eq!(header(&r), Some("u=5, i=?0"));
}

#[tokio::test]
async fn handler_set_header_is_left_untouched() {
    let app = Router::new()
        .route(
            "/own",
            get(own_header).layer(PriorityLayer::new().urgency(0).incremental(false)),
        )
        .route(
            "/own-nested",
            get(own_header).layer(PriorityLayer::new().urgency(1)),
        )
        .layer(PriorityLayer::new().ignore_client());

    for path in ["/own", "/own-nested"] {
        let r = send(&app, path, &["u=2"]).await;
        assert_eq!(r.priority, vec!["u=7, i".to_owned()], "{path}");
        assert_eq!(r.body, "own");
    }
}

#[tokio::test]
async fn route_layer_and_router_layer() {
    // `route_layer` covers the routes registered before it, not the 404 fallback.
    let routed = Router::new()
        .route("/a", get(echo))
        .route("/b", get(echo))
        .route_layer(PriorityLayer::new().urgency(1));
    for path in ["/a", "/b"] {
        let r = send(&routed, path, &["u=6, i"]).await;
        assert_eq!(header(&r), Some("u=1"), "{path}");
        assert_eq!(r.body, "u=1, i");
    }
    let r = send(&routed, "/missing", &[]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(header(&r), None);

    // `Router::layer` covers everything, the fallback included.
    let layered = Router::new()
        .route("/a", get(echo))
        .layer(PriorityLayer::new().incremental(true));
    let r = send(&layered, "/a", &["u=6"]).await;
    assert_eq!(header(&r), Some("i"));
    assert_eq!(r.body, "u=6, i");
    let r = send(&layered, "/missing", &[]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(header(&r), Some("i"));
}

#[tokio::test]
async fn inner_layer_overrides_outer_for_what_it_pins() {
    let app = Router::new()
        // Outer pins u=5; inner pins i: both apply.
        .route(
            "/inc",
            get(echo).layer(PriorityLayer::new().incremental(true)),
        )
        // Inner pins urgency: it overrides the outer urgency.
        .route("/urgent", get(echo).layer(PriorityLayer::new().urgency(0)))
        // Inner follows: the outer decision stands, in the header and for the handler.
        .route("/follow", get(echo).layer(PriorityLayer::new()))
        // Inner clamp starts from the outer's effective urgency (5) and changes it.
        .route(
            "/clamp",
            get(echo).layer(PriorityLayer::new().clamp_urgency(0, 2)),
        )
        // Inner clamp that does not change the outer's value pins nothing more.
        .route(
            "/clamp-noop",
            get(echo).layer(PriorityLayer::new().clamp_urgency(4, 6)),
        )
        // Inner ignore_client pins both, over everything outer.
        .route(
            "/ignore",
            get(echo).layer(PriorityLayer::new().ignore_client()),
        )
        .route("/bare", get(echo))
        .layer(PriorityLayer::new().urgency(5));

    let cases = [
        ("/inc", Some("u=5, i"), "u=5, i"),
        ("/urgent", Some("u=0"), "u=0"),
        ("/follow", Some("u=5"), "u=5"),
        ("/clamp", Some("u=2"), "u=2"),
        ("/clamp-noop", Some("u=5"), "u=5"),
        ("/ignore", Some("u=3, i=?0"), "u=3"),
        ("/bare", Some("u=5"), "u=5"),
    ];
    for (path, want_header, want_body) in cases {
        let r = send(&app, path, &["u=1, i=?0"]).await;
        assert_eq!(header(&r), want_header, "{path}");
        assert_eq!(r.body, want_body, "{path}");
    }
}

#[tokio::test]
async fn outer_pins_survive_an_inner_layer_that_pins_less() {
    let app = Router::new()
        .route("/a", get(echo).layer(PriorityLayer::new().urgency(2)))
        .route(
            "/b",
            get(echo).layer(PriorityLayer::new().incremental(false)),
        )
        .layer(
            PriorityLayer::new()
                .ignore_client()
                .urgency(6)
                .incremental(true),
        );

    let r = send(&app, "/a", &["u=0"]).await;
    assert_eq!(header(&r), Some("u=2, i"));
    assert_eq!(r.body, "u=2, i");
    let r = send(&app, "/b", &["u=0"]).await;
    assert_eq!(header(&r), Some("u=6, i=?0"));
    assert_eq!(r.body, "u=6");
}

#[tokio::test]
async fn follow_client_outer_with_ignore_client_inner() {
    let app = Router::new()
        .route(
            "/bulk",
            get(echo).layer(PriorityLayer::new().ignore_client().urgency(7)),
        )
        .route("/other", get(echo))
        .layer(PriorityLayer::new().clamp_urgency(1, 7));

    let r = send(&app, "/bulk", &["u=0, i"]).await;
    assert_eq!(header(&r), Some("u=7, i=?0"));
    assert_eq!(r.body, "u=7");

    // The outer clamp still governs routes the inner layer does not cover.
    let r = send(&app, "/other", &["u=0, i"]).await;
    assert_eq!(header(&r), Some("u=1, u-range=(1 7)"));
    assert_eq!(r.body, "u=1, i");
}

#[tokio::test]
async fn three_levels_router_layer_route_layer_and_method_router_layer() {
    let app = Router::new()
        .route("/x", get(echo).layer(PriorityLayer::new().urgency(0)))
        .route("/y", get(echo))
        .route_layer(PriorityLayer::new().incremental(true))
        .layer(PriorityLayer::new().ignore_client().urgency(4));

    // Innermost u=0, middle i, outermost pins both but is overridden for both.
    let r = send(&app, "/x", &["u=6"]).await;
    assert_eq!(header(&r), Some("u=0, i"));
    assert_eq!(r.body, "u=0, i");

    let r = send(&app, "/y", &["u=6"]).await;
    assert_eq!(header(&r), Some("u=4, i"));
    assert_eq!(r.body, "u=4, i");

    // Only the outermost layer sees the fallback.
    let r = send(&app, "/z", &["u=6"]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(header(&r), Some("u=4, i=?0"));
}

#[tokio::test]
async fn nested_router_layers_compose() {
    let api = Router::new()
        .route("/items", get(echo))
        .layer(PriorityLayer::new().incremental(true));
    let app = Router::new()
        .nest("/api", api)
        .route("/", get(echo))
        .layer(PriorityLayer::new().urgency(2));

    let r = send(&app, "/api/items", &[]).await;
    assert_eq!(header(&r), Some("u=2, i"));
    assert_eq!(r.body, "u=2, i");
    let r = send(&app, "/", &[]).await;
    assert_eq!(header(&r), Some("u=2"));
}

#[tokio::test]
async fn header_values_are_valid_priority_fields() {
    // Whatever the layer writes must parse back to the effective priority for the
    // parameters it names (RFC 9218 §8: response parameters override request ones).
    let app = Router::new().route(
        "/",
        get(echo).layer(PriorityLayer::new().urgency(1).incremental(true)),
    );
    let r = send(&app, "/", &["u=6"]).await;
    let value = HeaderValue::from_str(header(&r).unwrap()).unwrap();
    assert_eq!(
        Priority::parse(value.to_str().unwrap()),
        Priority::parse(&r.body)
    );
}

// RFC 9218 §8: the client asked for u=5; the server's response names u=1; an intermediary
// merging them uses u=1 and keeps the client's incremental flag.
#[tokio::test]
async fn rfc9218_8_merging_example() {
    let app = Router::new().route("/", get(echo).layer(PriorityLayer::new().urgency(1)));
    for (client, merged) in [("u=5", "u=1"), ("u=5, i", "u=1, i")] {
        let r = send(&app, "/", &[client]).await;
        assert_eq!(header(&r), Some("u=1"));
        // The handler's view is the merge of RFC 9218 §8.
        assert_eq!(r.body, merged);
    }
}
