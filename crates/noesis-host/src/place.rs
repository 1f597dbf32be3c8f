//! Where a process keeps its memory: the store in force (`--store` /
//! `NOESIS_STORE`, else `$NOESIS_HOME/noesis.db`, `NOESIS_HOME`
//! defaulting to `~/.noesis`) and the project of the folder it works in.
//! Every front end opens the store and names the project this way, so the
//! command line, the server and workers see the same runs and frames.

use std::path::{Path, PathBuf};

use noesis_frames::project::{Project, identify, identify_cached};
use noesis_store::Store;

use crate::{HostError, Result};

/// The store and the project of a process, as plain data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Place {
    /// The store's URL given (`--store`, `NOESIS_STORE`); none: the file
    /// under [`Place::home`].
    pub store: Option<String>,
    /// `$NOESIS_HOME` (see `noesis_config::home_from`); none when neither
    /// `NOESIS_HOME` nor `HOME` is set.
    pub home: Option<PathBuf>,
    /// The folder the process works in (none: it has none).
    pub cwd: Option<PathBuf>,
    /// At most this many SQLite connections (none: the store's default,
    /// for a server's concurrent requests; one for a short command).
    pub connections: Option<u32>,
}

impl Place {
    /// The place of this process: `store` as given, the home and the
    /// current folder from its environment.
    pub fn of_process(store: Option<String>) -> Place {
        Place {
            store: store.filter(|s| !s.is_empty()),
            home: noesis_config::home_from(&|k| std::env::var(k).ok()),
            cwd: std::env::current_dir().ok(),
            connections: None,
        }
    }

    /// `$NOESIS_HOME`.
    pub fn home(&self) -> Result<&Path> {
        self.home.as_deref().ok_or_else(|| HostError::Message("neither NOESIS_HOME nor HOME is set".into()))
    }

    fn cwd(&self) -> Result<&Path> {
        self.cwd.as_deref().ok_or_else(|| HostError::Message("no current directory".into()))
    }

    /// The store URL in force; the home folder is made when the store is
    /// its file.
    pub fn store_url(&self) -> Result<String> {
        if let Some(url) = &self.store {
            return Ok(url.clone());
        }
        let home = self.home()?;
        std::fs::create_dir_all(home)
            .map_err(|e| HostError::Message(format!("{}: cannot create NOESIS_HOME: {e}", home.display())))?;
        Ok(home.join("noesis.db").to_string_lossy().into_owned())
    }

    /// What noesis itself writes that a scan of the project must leave out
    /// when `$NOESIS_HOME` lies inside it: the store in force when it is a
    /// SQLite file (the database and its journals) and the caches
    /// (`$NOESIS_HOME/cache`: project ids, remembered manifest verdicts).
    pub fn store_files(&self) -> Vec<PathBuf> {
        let mut own = match self.store_url() {
            Ok(url) => sqlite_files(&url, self.cwd.as_deref()),
            Err(_) => Vec::new(),
        };
        if let Some(home) = &self.home {
            own.push(home.join("cache"));
        }
        own
    }

    /// Opens the store in force.
    pub async fn open(&self) -> Result<Box<dyn Store>> {
        let url = self.store_url()?;
        noesis_store::open_with(&url, self.connections.unwrap_or(noesis_store::SQLITE_CONNECTIONS))
            .await
            .map_err(|e| HostError::Message(format!("{e}\nhint: pick another store with --store URL or NOESIS_STORE")))
    }

    /// The project of the folder. A git repository's id is kept in
    /// `$NOESIS_HOME/cache/projects.json`, so a command in a known
    /// repository starts no `git` process (a short command's largest cost
    /// otherwise).
    pub fn project(&self) -> Result<Project> {
        let cwd = self.cwd()?;
        let found = match &self.home {
            Some(home) => identify_cached(cwd, &home.join("cache").join("projects.json")),
            None => identify(cwd),
        };
        found.map_err(|e| HostError::Message(crate::chain(&e)))
    }

    /// The project and the store, with the project registered.
    pub async fn context(&self) -> Result<(Project, Box<dyn Store>)> {
        let project = self.project()?;
        let store = self.open().await?;
        store.ensure_project(&project.project_id, &project.root.to_string_lossy()).await?;
        Ok((project, store))
    }
}

/// The files of the SQLite store at `url` (a relative path is taken from
/// `cwd`): the database and its journals; none for PostgreSQL.
fn sqlite_files(url: &str, cwd: Option<&Path>) -> Vec<PathBuf> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Vec::new();
    }
    let path = url.trim_start_matches("sqlite://").trim_start_matches("sqlite:");
    let path = PathBuf::from(path.split('?').next().unwrap_or_default());
    let path = match cwd {
        Some(cwd) if !path.is_absolute() => cwd.join(&path),
        _ => path,
    };
    ["", "-wal", "-shm", "-journal"]
        .iter()
        .map(|suffix| {
            let mut p = path.clone().into_os_string();
            p.push(suffix);
            PathBuf::from(p)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sqlite_store_is_its_file_and_journals_and_postgres_has_none() {
        let files = sqlite_files("sqlite:///d/n.db?mode=rwc", None);
        let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(names, ["/d/n.db", "/d/n.db-wal", "/d/n.db-shm", "/d/n.db-journal"]);
        assert_eq!(sqlite_files("n.db", Some(Path::new("/w")))[0], Path::new("/w/n.db"));
        assert_eq!(sqlite_files("sqlite:n.db", None)[0], Path::new("n.db"));
        assert!(sqlite_files("postgres://u@h/db", None).is_empty());
        assert!(sqlite_files("postgresql://u@h/db", None).is_empty());
    }

    #[test]
    fn the_store_given_wins_else_the_file_under_home_which_is_made() {
        let given = Place { store: Some("postgres://x".into()), ..Place::default() };
        assert_eq!(given.store_url().unwrap(), "postgres://x");
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let place = Place { home: Some(home.clone()), ..Place::default() };
        assert_eq!(place.store_url().unwrap(), home.join("noesis.db").to_string_lossy());
        assert!(home.is_dir());
        let own = place.store_files();
        assert!(own.contains(&home.join("noesis.db")) && own.contains(&home.join("noesis.db-wal")), "{own:?}");
        assert!(own.contains(&home.join("cache")), "the caches are noesis's own too: {own:?}");
        let nowhere = Place::default();
        assert_eq!(nowhere.store_url().unwrap_err().to_string(), "neither NOESIS_HOME nor HOME is set");
        assert!(nowhere.store_files().is_empty());
        let gone = Place { cwd: Some(dir.path().join("gone")), ..Place::default() };
        assert!(gone.project().unwrap_err().to_string().contains("gone"));
        assert_eq!(nowhere.project().unwrap_err().to_string(), "no current directory");
    }
}
