//! Part 5: the Kubernetes control plane against the test bed's real kube-apiserver and etcd.
//!
//! 5a address assignment at scale (rivora-controller), 5b EndpointSlice change to forwarding
//! on a node agent serving 2,000 Services, 5c node-agent start-up and restart with adopted
//! VIPs, 5d failovers (controller leader, L2 holder, last endpoint to BGP withdraw), 5e Gateway
//! API at scale, 5f Services at scale on default flags. Each sub-part is its own table; one that fails becomes a table saying why, and
//! the others still run (5c needs 5b's agent, so it says so when 5b failed).

mod assign;
mod endpoints;
mod failover;
mod fleet;
mod gateway;
mod harness;
mod scale;
mod startup;

use anyhow::{Result, anyhow};

pub use harness::Bins;
use harness::Ctx;

use crate::report::Section;

/// Part 5's sub-parts, as `--only 5a` names them.
pub const SUBPARTS: &[char] = &['a', 'b', 'c', 'd', 'e', 'f'];

/// Runs the sub-parts in `only` (all when empty) in one test bed; one Section each.
pub fn run(bins: Bins, quick: bool, only: &[char]) -> Result<Vec<Section>> {
    let want = |c: char| only.is_empty() || only.contains(&c);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let ctx = Ctx::start(bins, quick).await?;
        let mut sections = Vec::new();
        if want('a') {
            sections.push(
                assign::run(&ctx)
                    .await
                    .unwrap_or_else(|e| crate::failed("5a. Kubernetes: address assignment", &e)),
            );
        }
        if want('b') || want('c') {
            const RESTART: &str = "5c. Kubernetes: node agent restart with adopted VIPs";
            match endpoints::run(&ctx).await {
                Ok((sec, mut serving)) => {
                    sections.push(sec);
                    if want('c') {
                        sections.push(
                            startup::run(&ctx, &mut serving)
                                .await
                                .unwrap_or_else(|e| crate::failed(RESTART, &e)),
                        );
                    }
                }
                Err(e) => {
                    sections.push(crate::failed(
                        "5b. Kubernetes: EndpointSlice change to forwarding",
                        &e,
                    ));
                    if want('c') {
                        sections.push(crate::failed(
                            RESTART,
                            &anyhow!("not run: it restarts 5b's node agent, and 5b failed"),
                        ));
                    }
                }
            }
        }
        if want('d') {
            sections.push(
                failover::run(&ctx)
                    .await
                    .unwrap_or_else(|e| crate::failed(failover::TITLE, &e)),
            );
        }
        if want('e') {
            sections.push(
                gateway::run(&ctx)
                    .await
                    .unwrap_or_else(|e| crate::failed(gateway::TITLE, &e)),
            );
        }
        if want('f') {
            sections.push(
                scale::run(&ctx)
                    .await
                    .unwrap_or_else(|e| crate::failed(scale::TITLE, &e)),
            );
        }
        Ok(sections)
    })
}
