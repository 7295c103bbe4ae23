//! `tranche controllers`: the members, the leader, term, commit and applied index and
//! each member's lag; or a member added or removed.

use std::path::PathBuf;
use std::process::ExitCode;

use tranche_proto::{ClientRequest, Member, MembershipChange, Query, Response};

use crate::client_cfg::connect;
use crate::exit::{failed, run, unexpected};

#[derive(clap::Args, Debug)]
pub struct ControllersArgs {
    #[command(subcommand)]
    change: Option<ControllersChange>,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    config: Option<PathBuf>,
}

#[derive(clap::Subcommand, Debug)]
pub enum ControllersChange {
    /// Add a controller (start it first with `join = true`).
    Add {
        #[arg(long)]
        id: u64,
        #[arg(long)]
        name: String,
        #[arg(long)]
        peer_addr: String,
        #[arg(long)]
        client_addr: String,
    },
    /// Remove a controller.
    Remove {
        #[arg(long)]
        id: u64,
    },
}

pub fn controllers(args: &ControllersArgs) -> ExitCode {
    run("controllers", async {
        let (client, _) = connect(&args.config)?;
        if let Some(change) = &args.change {
            let change = match change {
                ControllersChange::Add {
                    id,
                    name,
                    peer_addr,
                    client_addr,
                } => MembershipChange::Add(Member {
                    id: *id,
                    name: name.clone(),
                    peer_addr: peer_addr.clone(),
                    client_addr: client_addr.clone(),
                }),
                ControllersChange::Remove { id } => MembershipChange::Remove { id: *id },
            };
            return match client
                .request(&ClientRequest::Membership(change))
                .await
                .map_err(failed)?
            {
                Response::Done => Ok(()),
                Response::Error(e) => Err(e.into()),
                other => Err(unexpected(&other)),
            };
        }
        // The leader's view has every member's progress.
        let mut st = match client
            .read(Query::Controllers, true)
            .await
            .map_err(failed)?
        {
            Response::Controllers(s) => s,
            other => return Err(unexpected(&other)),
        };
        if let Some(l) = st.leader.filter(|l| *l != st.id) {
            if let Some(m) = st.members.iter().find(|m| m.member.id == l) {
                if let Ok(addr) = m.member.client_addr.parse() {
                    if let Some(i) = client.controllers().iter().position(|a| *a == addr) {
                        if let Ok(Response::Controllers(s)) = client
                            .request_to(
                                i,
                                &ClientRequest::Read {
                                    query: Query::Controllers,
                                    stale: true,
                                },
                            )
                            .await
                        {
                            st = s;
                        }
                    }
                }
            }
        }
        if args.json {
            println!("{}", serde_json::to_string(&st).unwrap_or_default());
            return Ok(());
        }
        println!(
            "term {}  leader {}  commit {}  applied {}  image {}  first log index {}",
            st.term,
            st.leader
                .map(|l| l.to_string())
                .unwrap_or_else(|| "none".into()),
            st.commit,
            st.applied,
            st.image_index,
            st.first_index
        );
        println!(
            "{:>4} {:<10} {:<22} {:<22} {:<6} {:>8} {:>6}",
            "ID", "NAME", "PEER", "CLIENT", "ROLE", "MATCHED", "LAG"
        );
        for m in &st.members {
            let role = if Some(m.member.id) == st.leader {
                "leader"
            } else if m.voter {
                "voter"
            } else {
                "-"
            };
            println!(
                "{:>4} {:<10} {:<22} {:<22} {:<6} {:>8} {:>6}",
                m.member.id,
                m.member.name,
                m.member.peer_addr,
                m.member.client_addr,
                role,
                m.matched
                    .map(|x| x.to_string())
                    .unwrap_or_else(|| "-".into()),
                m.lag.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
            );
        }
        Ok(())
    })
}
