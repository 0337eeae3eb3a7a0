//! The manager's Kubernetes client: kube's own service stack with one more tower layer that
//! holds every request to `--kube-api-qps` (with `--kube-api-burst` above it) and counts
//! requests by HTTP method and status code, as client-go's rate limiter and its
//! `rest_client_requests_total` do for Go controllers. With leader election it also keeps
//! the leader's fence ([`super::fence`]): past the leader's authority, every request but the
//! election's own is refused before it is sent.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tower::{Layer, Service};

use super::fence::{Fence, NotLeading, exempt};
use super::metrics::Metrics;

/// A request's error: the wrapped service's, or [`NotLeading`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The layer: a rate limiter shared by every request, the metrics, and the leader's fence.
#[derive(Clone)]
pub struct ApiLayer {
    limiter: Option<Arc<DefaultDirectRateLimiter>>,
    metrics: Arc<Metrics>,
    fence: Fence,
}

impl ApiLayer {
    /// `qps` requests per second sustained (none when not positive: no limit), `burst` at
    /// once (at least 1).
    pub fn new(qps: f32, burst: u32, metrics: Arc<Metrics>) -> Self {
        let limiter = (qps > 0.0).then(|| {
            let period = Duration::from_secs_f64(1.0 / f64::from(qps));
            let burst = NonZeroU32::new(burst.max(1)).unwrap_or(NonZeroU32::MIN);
            // `with_period` refuses only a zero period; a positive qps never gives one.
            let quota = Quota::with_period(period)
                .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
                .allow_burst(burst);
            Arc::new(RateLimiter::direct(quota))
        });
        Self {
            limiter,
            metrics,
            fence: Fence::default(),
        }
    }

    /// Requests are refused past `fence` (but the leader election's own).
    #[must_use]
    pub fn fenced(mut self, fence: Fence) -> Self {
        self.fence = fence;
        self
    }
}

impl<S> Layer<S> for ApiLayer {
    type Service = ApiService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiService {
            inner,
            layer: self.clone(),
            wait: None,
            permitted: false,
        }
    }
}

type Wait = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The service the layer makes. It is ready once the limiter lets one more request go (as
/// tower's own rate limit does, in `poll_ready`), and then as ready as the service it wraps.
pub struct ApiService<S> {
    inner: S,
    layer: ApiLayer,
    wait: Option<Wait>,
    permitted: bool,
}

impl<S, B, R> Service<http::Request<B>> for ApiService<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.permitted {
            if let Some(limiter) = &self.layer.limiter {
                let wait = self.wait.get_or_insert_with(|| {
                    let limiter = limiter.clone();
                    Box::pin(async move { limiter.until_ready().await })
                });
                if wait.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
            }
            self.permitted = true;
        }
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        self.permitted = false;
        if !exempt(request.uri().path()) && !self.layer.fence.open() {
            return Box::pin(async { Err(NotLeading.into()) });
        }
        let metrics = self.layer.metrics.clone();
        let method = request.method().as_str().to_string();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
            let code = response.as_ref().map_or(0, |r| r.status().as_u16());
            metrics.api_request(&method, code);
            response.map_err(Into::into)
        })
    }
}

/// A client for `config` with the layer.
///
/// # Errors
/// kube's, for a configuration it cannot build a client from.
pub fn client(config: kube::Config, layer: &ApiLayer) -> Result<kube::Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(layer)
        .build())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_quota_allows_the_burst_at_once_then_the_rate() {
        let layer = ApiLayer::new(2.0, 3, Arc::new(Metrics::new()));
        let limiter = layer.limiter.unwrap();
        for _ in 0..3 {
            assert!(limiter.check().is_ok(), "within the burst");
        }
        assert!(limiter.check().is_err(), "past the burst");
        assert!(
            ApiLayer::new(0.0, 3, Arc::new(Metrics::new()))
                .limiter
                .is_none()
        );
    }

    /// A service that answers every request at once with 200.
    #[derive(Clone)]
    struct Answer;

    impl Service<http::Request<()>> for Answer {
        type Response = http::Response<()>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            std::future::ready(Ok(http::Response::new(())))
        }
    }

    #[tokio::test]
    async fn requests_past_the_burst_wait_and_every_answer_is_counted() {
        let metrics = Arc::new(Metrics::new());
        // One request per minute, a burst of two: the third is held.
        let mut service = ApiLayer::new(1.0 / 60.0, 2, metrics.clone()).layer(Answer);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        for _ in 0..2 {
            assert!(service.poll_ready(&mut cx).is_ready(), "within the burst");
            let request = http::Request::get("/api/v1/pods").body(()).unwrap();
            service.call(request).await.unwrap();
        }
        assert!(service.poll_ready(&mut cx).is_pending(), "past the burst");
        assert!(service.poll_ready(&mut cx).is_pending(), "still held");
        let text = metrics.encode();
        assert!(
            text.contains("tfops_kube_api_requests_total{method=\"GET\",code=\"200\"} 2"),
            "{text}"
        );
    }
}
