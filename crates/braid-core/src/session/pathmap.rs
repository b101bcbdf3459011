//! The session's paths by id: a small vector kept sorted by id, with the part of
//! `BTreeMap`'s interface the session uses (lookups, in-order iteration, insert-or-replace).
//!
//! Why not a `BTreeMap`: a session has a handful of paths (at most `max_paths` live ones
//! and the abandoned ones it keeps), and the send path walks them several times per
//! packet; a tree's iterator costs far more per step than a slice's, most of all under the
//! fuzz targets' coverage instrumentation (a third of `session_datagram`'s time went to
//! `BTreeMap<PathId, Path>` iteration). Iteration order (ascending id) and `insert`
//! replacing an existing entry are as with the map, so the session behaves the same.
//!
//! Owns: the storage of the paths. Must not touch: what a path is or does (`crate::path`).

use crate::ids::PathId;
use crate::path::Path;

/// Paths by id, in ascending id order.
#[derive(Default)]
pub(super) struct PathMap {
    entries: Vec<(PathId, Path)>,
}

impl std::fmt::Debug for PathMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.entries.iter().map(|(k, v)| (k, v)))
            .finish()
    }
}

impl PathMap {
    pub(super) fn get(&self, id: &PathId) -> Option<&Path> {
        self.entries.iter().find(|e| e.0 == *id).map(|e| &e.1)
    }

    pub(super) fn get_mut(&mut self, id: &PathId) -> Option<&mut Path> {
        self.entries
            .iter_mut()
            .find(|e| e.0 == *id)
            .map(|e| &mut e.1)
    }

    /// Add `p` as path `id`, or replace the path that had this id (returned).
    pub(super) fn insert(&mut self, id: PathId, p: Path) -> Option<Path> {
        match self.entries.binary_search_by_key(&id, |e| e.0) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, p)),
            Err(i) => {
                self.entries.insert(i, (id, p));
                None
            }
        }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn keys(&self) -> Keys<'_> {
        Keys(self.entries.iter())
    }

    pub(super) fn values(&self) -> Values<'_> {
        Values(self.entries.iter())
    }

    pub(super) fn values_mut(&mut self) -> ValuesMut<'_> {
        ValuesMut(self.entries.iter_mut())
    }
}

type Entry = (PathId, Path);

// Iterators of their own (not `impl Iterator`, not a `Map` with a function pointer): the
// borrow checker knows they have no destructor, so `if let Some(x) =
// self.paths.values().find(..)` ends its borrow at once as with `BTreeMap`'s iterators, and
// `next` is a direct call the compiler inlines (a function pointer would be an indirect
// call, which the fuzz build also traces).
pub(super) struct Keys<'a>(std::slice::Iter<'a, Entry>);
pub(super) struct Values<'a>(std::slice::Iter<'a, Entry>);
pub(super) struct ValuesMut<'a>(std::slice::IterMut<'a, Entry>);

impl<'a> Iterator for Keys<'a> {
    type Item = &'a PathId;
    fn next(&mut self) -> Option<&'a PathId> {
        self.0.next().map(|e| &e.0)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl<'a> Iterator for Values<'a> {
    type Item = &'a Path;
    fn next(&mut self) -> Option<&'a Path> {
        self.0.next().map(|e| &e.1)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl<'a> Iterator for ValuesMut<'a> {
    type Item = &'a mut Path;
    fn next(&mut self) -> Option<&'a mut Path> {
        self.0.next().map(|e| &mut e.1)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::time::Instant;

    fn path(id: PathId) -> Path {
        let cfg = Config::default();
        Path::new(id, &cfg, cfg.cc, Instant(0))
    }

    /// Iteration is in ascending id order whatever the insertion order, as with the
    /// `BTreeMap` it replaces, and inserting an existing id replaces that path.
    #[test]
    fn iterates_in_id_order_and_insert_replaces() {
        let mut m = PathMap::default();
        for id in [3, 0, 7, 1] {
            assert!(m.insert(id, path(id)).is_none());
        }
        assert_eq!(m.keys().copied().collect::<Vec<_>>(), vec![0, 1, 3, 7]);
        assert_eq!(
            m.values().map(|p| p.id).collect::<Vec<_>>(),
            vec![0, 1, 3, 7]
        );
        let mut p = path(3);
        p.next_pn = 42;
        let old = m.insert(3, p).expect("path 3 was there");
        assert_eq!(old.next_pn, 0);
        assert_eq!(m.len(), 4);
        assert_eq!(m.get(&3).map(|p| p.next_pn), Some(42));
        assert!(m.get(&2).is_none());
        m.get_mut(&7).unwrap().next_pn = 9;
        assert_eq!(
            m.values_mut().map(|p| p.next_pn).collect::<Vec<_>>(),
            vec![0, 0, 42, 9]
        );
    }
}
