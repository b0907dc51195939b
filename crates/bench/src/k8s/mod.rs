//! Part 5: the Kubernetes control plane against the test bed's real kube-apiserver and etcd.
//!
//! 5a address assignment at scale (rivora-controller), 5b EndpointSlice change to forwarding
//! on a node agent serving 2,000 Services, 5c node-agent start-up and restart with adopted
//! VIPs. Each sub-part is its own table; one that fails becomes a table saying why, and the
//! others still run (5c needs 5b's agent, so it says so when 5b failed).

mod assign;
mod endpoints;
mod fleet;
mod harness;
mod startup;

use anyhow::{Result, anyhow};

pub use harness::Bins;
use harness::Ctx;

use crate::report::Section;

/// Runs every sub-part in one test bed; one Section each.
pub fn run(bins: Bins, quick: bool) -> Result<Vec<Section>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let ctx = Ctx::start(bins, quick).await?;
        let mut sections = Vec::new();
        sections.push(
            assign::run(&ctx)
                .await
                .unwrap_or_else(|e| crate::failed("5a. Kubernetes: address assignment", &e)),
        );
        const RESTART: &str = "5c. Kubernetes: node agent restart with adopted VIPs";
        match endpoints::run(&ctx).await {
            Ok((sec, mut serving)) => {
                sections.push(sec);
                sections.push(
                    startup::run(&ctx, &mut serving)
                        .await
                        .unwrap_or_else(|e| crate::failed(RESTART, &e)),
                );
            }
            Err(e) => {
                sections.push(crate::failed(
                    "5b. Kubernetes: EndpointSlice change to forwarding",
                    &e,
                ));
                sections.push(crate::failed(
                    RESTART,
                    &anyhow!("not run: it restarts 5b's node agent, and 5b failed"),
                ));
            }
        }
        Ok(sections)
    })
}
