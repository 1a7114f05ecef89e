//! A bounded ring of points for the "last minutes" series of a live page.

use std::collections::VecDeque;

/// The newest `capacity` points of a series; pushing past it drops the oldest, so memory
/// stays flat however long a tool runs. A tool pushes one point per tick on its control
/// plane (e.g. once a second) and reads the ring when the page polls.
#[derive(Debug, Clone)]
pub struct History<T> {
    capacity: usize,
    points: VecDeque<T>,
}

impl<T> History<T> {
    /// An empty ring keeping at most `capacity` points (at least 1).
    pub fn new(capacity: usize) -> History<T> {
        let capacity = capacity.max(1);
        History {
            capacity,
            points: VecDeque::with_capacity(capacity.min(4096)),
        }
    }

    /// Appends `point`, dropping the oldest when full.
    pub fn push(&mut self, point: T) {
        if self.points.len() == self.capacity {
            self.points.pop_front();
        }
        self.points.push_back(point);
    }

    /// The points, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator {
        self.points.iter()
    }

    /// The newest point.
    pub fn last(&self) -> Option<&T> {
        self.points.back()
    }

    /// How many points are kept.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// No point yet.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_points_in_order() {
        let mut h = History::new(3);
        assert!(h.is_empty());
        for i in 0..5 {
            h.push(i);
        }
        assert_eq!(h.iter().copied().collect::<Vec<_>>(), vec![2, 3, 4]);
        assert_eq!(h.last(), Some(&4));
        assert_eq!(h.len(), 3);
        let mut z = History::new(0);
        z.push(1);
        z.push(2);
        assert_eq!(z.iter().copied().collect::<Vec<_>>(), vec![2]);
    }
}
