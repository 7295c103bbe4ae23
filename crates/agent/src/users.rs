//! Whose account a job runs as on this node: the job's user (its certificate's name, or
//! the user an admin submitted for), mapped through the agent config's `[users]`, looked
//! up in the node's account database (NSS: files, LDAP, SSSD alike).
//!
//! A job never runs as anyone but its user's account: no account, a root account the
//! config does not allow, or an agent that cannot switch to the account, and the job is
//! not started. These are the user's or the config's doing, not the node's fault: the
//! attempt fails with the refusal as its reason and the node stays in service.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Group, Uid, User};

use crate::config::AgentConfig;
use crate::exec::LaunchSpec;

/// A job's account on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// The job's user (the certificate's name).
    pub user: String,
    /// The node's account name for it.
    pub name: String,
    pub uid: u32,
    /// The primary group.
    pub gid: u32,
    /// Every group of the account (the primary one included), as `getgrouplist` has them.
    pub groups: Vec<u32>,
    pub home: PathBuf,
}

/// Why a job does not run as its user on this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "user {user} has no account on node {node}{}",
        mapped_note(user, account)
    )]
    NoAccount {
        user: String,
        account: String,
        node: String,
    },
    #[error(
        "user {user} would run as root (uid 0) on node {node}, and the agent config refuses \
         root jobs (set `allow_root = true` to allow them)"
    )]
    Root { user: String, node: String },
    #[error(
        "user {user} would run as the account {account} (uid {uid}) on node {node}, below \
         the agent config's min_uid = {min_uid}: system accounts do not run jobs"
    )]
    SystemAccount {
        user: String,
        account: String,
        uid: u32,
        min_uid: u32,
        node: String,
    },
    #[error(
        "user {user} would run as the account {account} (uid {uid}) on node {node}, which is \
         in the group {group}, and the agent config's deny_groups refuses its members"
    )]
    DeniedGroup {
        user: String,
        account: String,
        uid: u32,
        group: String,
        node: String,
    },
    #[error("cannot look up the account of user {user} on node {node}: {reason}")]
    Lookup {
        user: String,
        node: String,
        reason: String,
    },
    #[error("the home directory {} of user {user} does not exist on node {node}; it is the job's working directory", home.display())]
    NoHome {
        user: String,
        home: PathBuf,
        node: String,
    },
    #[error(
        "the agent on node {node} runs as uid {agent_uid}, not root, so it cannot start jobs \
         of user {user} (uid {uid}); run the agent as root"
    )]
    CannotSwitch {
        user: String,
        uid: u32,
        agent_uid: u32,
        node: String,
    },
}

fn mapped_note(user: &str, account: &str) -> String {
    if user == account {
        String::new()
    } else {
        format!(" (the agent config's [users] maps it to the account {account}, which does not exist there)")
    }
}

/// The node's account name for `user`: its `[users]` entry, else the `"*"` entry, else
/// the name itself.
pub fn account_name<'a>(users: &'a BTreeMap<String, String>, user: &'a str) -> &'a str {
    users
        .get(user)
        .or_else(|| users.get("*"))
        .map_or(user, String::as_str)
}

/// Looks up the account of `user` on this node and applies the config's rules: root only
/// with `allow_root`; any other account from `min_uid` up and in none of the
/// `deny_groups`.
pub fn resolve(cfg: &AgentConfig, user: &str) -> Result<Account, Refusal> {
    let node = cfg.node.clone();
    let name = account_name(&cfg.users, user);
    let lookup = |reason: String| Refusal::Lookup {
        user: user.to_string(),
        node: node.clone(),
        reason,
    };
    let found = User::from_name(name).map_err(|e| lookup(e.desc().to_string()))?;
    let Some(u) = found else {
        return Err(Refusal::NoAccount {
            user: user.to_string(),
            account: name.to_string(),
            node,
        });
    };
    if u.uid.is_root() && !cfg.allow_root {
        return Err(Refusal::Root {
            user: user.to_string(),
            node,
        });
    }
    let cname = CString::new(name).map_err(|_| lookup("the account name has a NUL byte".into()))?;
    let mut groups: Vec<u32> = nix::unistd::getgrouplist(&cname, u.gid)
        .map_err(|e| lookup(format!("its groups: {}", e.desc())))?
        .into_iter()
        .map(Gid::as_raw)
        .collect();
    groups.sort_unstable();
    groups.dedup();
    let uid = u.uid.as_raw();
    if uid != 0 {
        if uid < cfg.min_uid {
            return Err(Refusal::SystemAccount {
                user: user.to_string(),
                account: name.to_string(),
                uid,
                min_uid: cfg.min_uid,
                node,
            });
        }
        for g in &cfg.deny_groups {
            let Ok(Some(grp)) = Group::from_name(g) else {
                continue;
            };
            if groups.contains(&grp.gid.as_raw()) || u.gid == grp.gid {
                return Err(Refusal::DeniedGroup {
                    user: user.to_string(),
                    account: name.to_string(),
                    uid,
                    group: g.clone(),
                    node,
                });
            }
        }
    }
    Ok(Account {
        user: user.to_string(),
        name: name.to_string(),
        uid: u.uid.as_raw(),
        gid: u.gid.as_raw(),
        groups,
        home: u.dir,
    })
}

impl Account {
    /// Makes `spec` run as this account: uid, gid and groups (none to change where the
    /// agent itself runs as the account), `HOME`, `USER` and `LOGNAME`, and the working
    /// directory: for a process job the directory it was submitted from where that
    /// exists on this node (a shared file system), else the home, which must exist; a
    /// container uses the home where its rootfs has it.
    pub fn apply_to(
        &self,
        spec: &mut LaunchSpec,
        node: &str,
        submit_dir: Option<&str>,
    ) -> Result<(), Refusal> {
        let agent = Uid::effective();
        if !agent.is_root() {
            if agent.as_raw() != self.uid {
                return Err(Refusal::CannotSwitch {
                    user: self.user.clone(),
                    uid: self.uid,
                    agent_uid: agent.as_raw(),
                    node: node.to_string(),
                });
            }
            spec.user = None;
            spec.groups = Vec::new();
        } else {
            spec.user = Some((self.uid, self.gid));
            spec.groups = self.groups.clone();
        }
        let here = self.dir_on_node(submit_dir);
        if spec.image == "host" && !Path::new(&here).is_dir() {
            return Err(Refusal::NoHome {
                user: self.user.clone(),
                home: self.home.clone(),
                node: node.to_string(),
            });
        }
        let home = self.home.to_string_lossy().into_owned();
        spec.env.insert("HOME".into(), home.clone());
        spec.env.insert("USER".into(), self.name.clone());
        spec.env.insert("LOGNAME".into(), self.name.clone());
        spec.cwd = Some(if spec.image == "host" { here } else { home });
        Ok(())
    }

    /// The directory on this node a process job of this account runs in: the one it
    /// was submitted from where that exists here, else the home.
    pub fn dir_on_node(&self, submit_dir: Option<&str>) -> String {
        submit_dir
            .filter(|d| Path::new(d).is_dir())
            .map_or_else(|| self.home.to_string_lossy().into_owned(), str::to_string)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_users_table_maps_names_and_the_star_maps_the_rest() {
        let users = BTreeMap::from([
            ("alice".to_string(), "asmith".to_string()),
            ("*".to_string(), "jobs".to_string()),
        ]);
        assert_eq!(account_name(&users, "alice"), "asmith");
        assert_eq!(account_name(&users, "bob"), "jobs");
        assert_eq!(account_name(&BTreeMap::new(), "bob"), "bob");
    }

    #[test]
    fn refusals_name_the_user_the_node_and_the_rule() {
        let e = Refusal::NoAccount {
            user: "alice".into(),
            account: "alice".into(),
            node: "n3".into(),
        };
        assert_eq!(e.to_string(), "user alice has no account on node n3");
        let e = Refusal::NoAccount {
            user: "alice".into(),
            account: "asmith".into(),
            node: "n3".into(),
        };
        assert!(e
            .to_string()
            .starts_with("user alice has no account on node n3 (the agent config's [users] maps it to the account asmith"));
        let e = Refusal::Root {
            user: "root".into(),
            node: "n3".into(),
        };
        assert!(e.to_string().contains("`allow_root = true`"), "{e}");
    }
}
