//! End-to-end restarts: adoption of pinned state after SIGKILL, pruning on a
//! changed file, the persistent datapath and the clean uninstall.

mod common;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;

use common::*;
use rivora_dataplane::stages;

/// name -> (service ID, slice offset, slice size, backend IDs)
fn layout(lab: &Lab) -> BTreeMap<String, (u32, u32, u32, Vec<u32>)> {
    lab.vips()
        .into_iter()
        .map(|v| {
            let ids = v.backends.iter().map(|b| b.backend_id).collect();
            (v.name, (v.service_id, v.maglev_offset, v.maglev_size, ids))
        })
        .collect()
}

fn pinned_vip4_entries(lab: &Lab) -> Vec<(u16, u8, u32)> {
    let data = aya::maps::MapData::from_pin(lab.pin_dir.join("vip_map")).expect("vip_map pinned");
    let map: aya::maps::HashMap<_, rivora_abi::VipKey4, rivora_abi::VipValue> =
        aya::maps::Map::HashMap(data).try_into().unwrap();
    map.iter()
        .map(|e| {
            let (k, v) = e.unwrap();
            (rivora_abi::port_from_be(k.port), k.proto, v.service_id)
        })
        .collect()
}

/// Acceptance: SIGKILL, restart with the same file: every VIP keeps its
/// service ID, slice and backend IDs; a file that drops one VIP and adds
/// another: the dropped one is gone from every map, the new one gets an ID
/// that was never in use.
#[test]
fn sigkill_restart_adopts_every_id_and_a_changed_file_prunes() {
    let mut lab = Lab::new("adopt");
    let w = [(1, 1), (2, 1), (3, 2)];
    let web4 = vip_yaml("web4", VIP4, 80, "tcp", &backends_yaml(false, &w));
    let dns4 = vip_yaml(
        "dns4",
        VIP4,
        53,
        "udp",
        &backends_yaml(false, &[(1, 1), (2, 3)]),
    );
    let web6 = vip_yaml("web6", VIP6, 80, "tcp", &backends_yaml(true, &w));
    lab.write_config(&[web4.clone(), dns4.clone(), web6.clone()]);
    lab.start(&[]);
    assert!(lab.tcp(VIP4, 80, 20000, 50).all_ok());
    let before = layout(&lab);
    assert_eq!(before.len(), 3);

    assert_eq!(lab.kill(libc::SIGKILL).signal(), Some(libc::SIGKILL));
    assert!(
        lab.pin_dir.join("vip_map").exists(),
        "SIGKILL leaves the pinned maps"
    );
    assert!(
        matches!(
            lab.rt.block_on(lab.client().status()),
            Err(rivora_api::ClientError::Stale { .. })
        ),
        "a SIGKILLed rivorad's socket is stale"
    );
    // What a script sees when it queries right after the restart: the dead socket (until
    // the new rivorad holds the lock and removes it), then nothing but a held lock
    // ("starting"), then a socket that answers; never a new socket file that refuses (bind(2)
    // makes the file before listen(2): rivorad renames a listening socket into place).
    let dead = std::fs::symlink_metadata(&lab.socket)
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .expect("the dead rivorad's socket file");
    lab.spawn(&[]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut seen: Vec<String> = Vec::new();
    loop {
        // The file as it was just before the connect: a refusal is the dead socket's only if
        // the dead socket was there (the new one may be renamed in right after).
        let before = std::fs::symlink_metadata(&lab.socket)
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
            .ok();
        let now = match std::os::unix::net::UnixStream::connect(&lab.socket) {
            Ok(_) => "answers".to_string(),
            Err(e) => {
                // Read after the connect: held from before the dead socket's removal on.
                let owner = rivora_api::instance::socket_owner(&lab.socket);
                match (e.kind(), before, owner) {
                    (std::io::ErrorKind::ConnectionRefused, Some(i), _) if i == dead => {
                        "stale".to_string()
                    }
                    (std::io::ErrorKind::NotFound, _, Some(_)) => "starting".to_string(),
                    other => format!("{e} ({other:?})"),
                }
            }
        };
        if seen.last() != Some(&now) {
            seen.push(now.clone());
        }
        if now == "answers" || std::time::Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    eprintln!("restart sequence: {seen:?}");
    let order = ["stale", "starting", "answers"];
    let rank = |s: &String| order.iter().position(|o| o == s);
    assert!(
        seen.last().map(String::as_str) == Some("answers")
            && seen.iter().all(|s| rank(s).is_some())
            && seen.windows(2).all(|w| rank(&w[0]) < rank(&w[1])),
        "a restart reads stale, starting, answers, in that order: {seen:?}"
    );
    let waited = lab
        .rt
        .block_on(
            lab.client()
                .with_wait(std::time::Duration::from_secs(30))
                .status(),
        )
        .expect("the restarted rivorad answers");
    assert!(waited.start.contains("adopted"), "{}", waited.start);
    assert!(
        lab.log().contains("adopted the maps pinned"),
        "{}",
        lab.log()
    );
    assert_eq!(
        layout(&lab),
        before,
        "service IDs, slices and backend IDs survive a SIGKILL restart"
    );
    let status = lab.status();
    assert!(
        status.start.contains("adopted 3 VIPs and 6 backends"),
        "{}",
        status.start
    );
    assert!(
        status
            .last_reload
            .changes
            .as_deref()
            .unwrap_or("")
            .contains("kept from pinned maps")
    );
    assert!(lab.tcp(VIP4, 80, 21000, 50).all_ok());
    assert!(lab.udp(VIP4, 53, 21000, 50).all_ok());

    // Again, with a file that drops dns4 and adds alt4.
    lab.kill(libc::SIGKILL);
    let alt4 = vip_yaml("alt4", VIP4, 81, "tcp", &backends_yaml(false, &[(3, 1)]));
    lab.write_config(&[web4, web6, alt4]);
    lab.start(&[]);
    let after = layout(&lab);
    assert!(!after.contains_key("dns4"));
    for name in ["web4", "web6"] {
        assert_eq!(after[name], before[name], "{name} untouched");
    }
    let highest_before = before.values().map(|v| v.0).max().unwrap();
    assert!(
        after["alt4"].0 > highest_before,
        "alt4 got service ID {} (in use before: up to {highest_before})",
        after["alt4"].0
    );
    let entries = pinned_vip4_entries(&lab);
    assert!(
        entries.iter().all(|(port, _, _)| *port != 53),
        "dns4 gone from vip_map: {entries:?}"
    );
    assert!(
        entries.iter().all(|(_, _, sid)| *sid != before["dns4"].0),
        "its service ID is unused: {entries:?}"
    );
    assert!(lab.tcp(VIP4, 81, 22000, 50).all_ok());
    assert_eq!(
        lab.udp(VIP4, 53, 22000, 5).ok,
        0,
        "the dropped VIP no longer answers"
    );
}

/// With --persist-datapath a stop leaves the datapath forwarding; the next
/// start swaps new programs into the same links; --uninstall removes it all.
/// Without it (acceptance 3) a stop detaches everything and leaves no pins.
#[test]
fn persistent_datapath_outlives_the_daemon_and_uninstall_removes_it() {
    let mut lab = Lab::new("pers");
    lab.write_config(&[vip_yaml(
        "web4",
        VIP4,
        80,
        "tcp",
        &backends_yaml(false, &[(1, 1), (2, 1)]),
    )]);
    lab.start(&["--persist-datapath"]);
    let s1 = lab.status();
    assert!(s1.persist_datapath && s1.programs.iter().all(|p| p.link_pinned));
    let stage_array = |s: &rivora_api::Status| vec![stages::pin_name(s.programs[0].program_id)];
    assert_eq!(stages::pinned(&lab.pin_dir), stage_array(&s1));
    assert_eq!(lab.kill(libc::SIGTERM).code(), Some(0));
    assert_eq!(
        stages::pinned(&lab.pin_dir),
        stage_array(&s1),
        "the attached program's stage array stays pinned with rivorad down"
    );
    assert!(
        lab.pin_dir.join("link_xdp_eth0").exists()
            && lab.pin_dir.join("link_tcx_egress_eth0").exists()
    );
    let (xdp, tcx) = lab.attached_programs();
    assert_eq!(
        xdp,
        Some(s1.programs[0].program_id),
        "XDP still attached with rivorad down"
    );
    assert_eq!(
        tcx,
        vec![s1.programs[1].program_id],
        "TCX still attached with rivorad down"
    );
    let r = lab.tcp(VIP4, 80, 20000, 100);
    assert!(r.all_ok(), "forwarding while rivorad is down:\n{r}");

    // Restart: new program IDs on the same link IDs.
    lab.start(&["--persist-datapath"]);
    let s2 = lab.status();
    assert!(
        s2.start.contains("swapped into the pinned links"),
        "{}",
        s2.start
    );
    for (a, b) in s1.programs.iter().zip(&s2.programs) {
        assert_ne!(a.program_id, b.program_id, "{} was replaced", a.name);
        assert_eq!(a.link_id, b.link_id, "{} kept its link", a.name);
    }
    assert_eq!(
        lab.attached_programs(),
        (
            Some(s2.programs[0].program_id),
            vec![s2.programs[1].program_id]
        )
    );
    // The replaced program's stage array goes after the grace period.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let now = stages::pinned(&lab.pin_dir);
        if now == stage_array(&s2) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "exactly the new program's stage array pinned within 10 s; last seen {now:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    // A start without the flag takes the links over and detaches on stop.
    assert_eq!(lab.kill(libc::SIGTERM).code(), Some(0));
    lab.start(&[]);
    let s3 = lab.status();
    assert_eq!(
        s3.programs[0].link_id, s2.programs[0].link_id,
        "still the same link"
    );
    assert!(
        !lab.pin_dir.join("link_xdp_eth0").exists(),
        "link pins dropped without --persist-datapath"
    );
    assert!(lab.stop());
    assert!(!lab.pin_dir.exists(), "no pins left behind");
    assert_eq!(
        lab.attached_programs(),
        (None, vec![]),
        "everything detached"
    );
    assert_eq!(
        lab.tcp(VIP4, 80, 21000, 5).ok,
        0,
        "nothing forwards any more"
    );

    // Persistent again, then the documented uninstall.
    lab.start(&["--persist-datapath"]);
    assert_eq!(lab.kill(libc::SIGKILL).signal(), Some(libc::SIGKILL));
    assert!(lab.tcp(VIP4, 80, 22000, 20).all_ok());
    let pin = lab.pin_dir.display().to_string();
    let (ok, log) = lab.run_rivorad(&["--uninstall", "--pin-dir", &pin]);
    assert!(ok, "{log}");
    assert!(
        !lab.pin_dir.exists(),
        "uninstall removes the pin directory:\n{log}"
    );
    lab.wait_detached(); // uninstall detaches the programs
}

/// A table pinned by a rivorad of another table size (an older build's default, 65,537) is
/// adopted by a restart without `--maglev-table-size`: the upgrade keeps every flow and slice
/// instead of refusing to start; the log says which length it kept.
#[test]
fn a_restart_without_the_flag_keeps_the_pinned_table_length() {
    let mut lab = Lab::new("keeplen");
    let web4 = vip_yaml(
        "web4",
        VIP4,
        80,
        "tcp",
        &backends_yaml(false, &[(1, 1), (2, 1)]),
    );
    lab.write_config(&[web4]);
    lab.start(&["--maglev-table-size", "65537"]);
    assert!(lab.tcp(VIP4, 80, 23000, 20).all_ok());
    let before = layout(&lab);
    assert_eq!(lab.kill(libc::SIGKILL).signal(), Some(libc::SIGKILL));
    lab.start(&[]);
    assert!(
        lab.log()
            .contains("keeping the pinned Maglev table's length"),
        "{}",
        lab.log()
    );
    assert!(lab.log().contains("pinned=65537"), "{}", lab.log());
    assert_eq!(layout(&lab), before, "adopted as it was");
    assert!(lab.tcp(VIP4, 80, 23100, 20).all_ok());
    let data = aya::maps::MapData::from_pin(lab.pin_dir.join("maglev_table")).unwrap();
    assert_eq!(data.info().unwrap().max_entries(), 65537);
}
