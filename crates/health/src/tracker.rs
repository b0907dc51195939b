//! Up/down decisions from a stream of probe results.

/// The state a target starts in, because a restarted control plane should not
/// take every backend out of rotation (or put every backend in) before it has
/// probed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Initial {
    /// No state yet: the first probe result decides at once, in either
    /// direction. Right for a newly added backend.
    #[default]
    Unknown,
    /// Assume up: it takes `fall` consecutive failures to go down. Right for
    /// a backend the dataplane is already sending traffic to.
    Up,
    /// Assume down: it takes `rise` consecutive successes to go up. Right for
    /// a backend that must prove itself before it gets traffic.
    Down,
}

impl From<Option<bool>> for Initial {
    /// Maps a known state ([`Tracker::is_up`]) back to a starting state, so a
    /// target restarted with a new spec keeps its up/down state.
    fn from(up: Option<bool>) -> Self {
        match up {
            None => Initial::Unknown,
            Some(true) => Initial::Up,
            Some(false) => Initial::Down,
        }
    }
}

/// Rise/fall hysteresis over probe results, kept free of I/O and clocks so it
/// can be tested exhaustively and reused by anything that produces results.
///
/// From up, `fall` consecutive failures take the target down; from down,
/// `rise` consecutive successes bring it up; from [`Initial::Unknown`] the
/// first result decides. A `rise` or `fall` of 0 acts as 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracker {
    rise: u32,
    fall: u32,
    up: Option<bool>,
    last: Option<bool>,
    streak: u32,
}

impl Tracker {
    /// A tracker with the given thresholds and starting state.
    pub fn new(rise: u32, fall: u32, initial: Initial) -> Self {
        let up = match initial {
            Initial::Unknown => None,
            Initial::Up => Some(true),
            Initial::Down => Some(false),
        };
        Tracker {
            rise: rise.max(1),
            fall: fall.max(1),
            up,
            last: None,
            streak: 0,
        }
    }

    /// Records one probe result and returns `Some(new_up)` if it changed the
    /// state (including the first decision from [`Initial::Unknown`]), so the
    /// caller acts only on changes.
    pub fn observe(&mut self, ok: bool) -> Option<bool> {
        if self.last == Some(ok) {
            self.streak = self.streak.saturating_add(1);
        } else {
            self.last = Some(ok);
            self.streak = 1;
        }
        let next = match self.up {
            None => ok,
            Some(true) if !ok && self.streak >= self.fall => false,
            Some(false) if ok && self.streak >= self.rise => true,
            Some(up) => up,
        };
        if self.up == Some(next) {
            None
        } else {
            self.up = Some(next);
            Some(next)
        }
    }

    /// The current state; `None` until the first result when started as
    /// [`Initial::Unknown`].
    pub fn is_up(&self) -> Option<bool> {
        self.up
    }

    /// How many identical results in a row ended with the last one (0 before
    /// any result), so status output can show progress towards rise/fall.
    pub fn consecutive(&self) -> u32 {
        self.streak
    }

    /// The last result observed, which together with
    /// [`consecutive`](Self::consecutive) says whether the streak is of
    /// successes or failures.
    pub fn last(&self) -> Option<bool> {
        self.last
    }

    /// The success threshold actually used (at least 1).
    pub fn rise(&self) -> u32 {
        self.rise
    }

    /// The failure threshold actually used (at least 1).
    pub fn fall(&self) -> u32 {
        self.fall
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds a pattern (`+` success, `-` failure) and returns the positions
    /// and values of the transitions.
    fn run(t: &mut Tracker, pattern: &str) -> Vec<(usize, bool)> {
        pattern
            .chars()
            .enumerate()
            .filter_map(|(i, c)| t.observe(c == '+').map(|up| (i, up)))
            .collect()
    }

    /// Reference model: the state after a prefix, computed from scratch.
    fn model(rise: u32, fall: u32, initial: Initial, results: &[bool]) -> Option<bool> {
        let (rise, fall) = (rise.max(1) as usize, fall.max(1) as usize);
        let mut up = match initial {
            Initial::Unknown => None,
            Initial::Up => Some(true),
            Initial::Down => Some(false),
        };
        for i in 0..results.len() {
            let ok = results[i];
            let run = results[..=i].iter().rev().take_while(|&&r| r == ok).count();
            up = match up {
                None => Some(ok),
                Some(true) if !ok && run >= fall => Some(false),
                Some(false) if ok && run >= rise => Some(true),
                s => s,
            };
        }
        up
    }

    #[test]
    fn unknown_first_result_decides() {
        let mut t = Tracker::new(3, 3, Initial::Unknown);
        assert_eq!(t.is_up(), None);
        assert_eq!(t.consecutive(), 0);
        assert_eq!(t.observe(true), Some(true));
        assert_eq!(t.is_up(), Some(true));
        assert_eq!(t.consecutive(), 1);

        let mut t = Tracker::new(3, 3, Initial::Unknown);
        assert_eq!(t.observe(false), Some(false));
        assert_eq!(t.is_up(), Some(false));
        // After the decision, normal hysteresis applies.
        assert_eq!(run(&mut t, "++-+++"), vec![(5, true)]);
    }

    #[test]
    fn initial_up_needs_fall_failures() {
        let mut t = Tracker::new(2, 3, Initial::Up);
        assert_eq!(t.is_up(), Some(true));
        assert_eq!(run(&mut t, "++--+---"), vec![(7, false)]);
        assert_eq!(t.consecutive(), 3);
        assert_eq!(t.last(), Some(false));
    }

    #[test]
    fn initial_down_needs_rise_successes() {
        let mut t = Tracker::new(2, 3, Initial::Down);
        assert_eq!(t.is_up(), Some(false));
        assert_eq!(run(&mut t, "--+-++"), vec![(5, true)]);
        assert_eq!(t.consecutive(), 2);
        assert_eq!(t.last(), Some(true));
    }

    #[test]
    fn no_transition_in_steady_state() {
        let mut t = Tracker::new(2, 2, Initial::Up);
        assert_eq!(run(&mut t, "++++++++"), vec![]);
        assert_eq!(t.consecutive(), 8);
        let mut t = Tracker::new(2, 2, Initial::Down);
        assert_eq!(run(&mut t, "--------"), vec![]);
    }

    #[test]
    fn rise_and_fall_cycle() {
        let mut t = Tracker::new(2, 3, Initial::Unknown);
        assert_eq!(
            run(&mut t, "+---++++---+-++"),
            vec![(0, true), (3, false), (5, true), (10, false), (14, true)]
        );
    }

    #[test]
    fn flapping_is_damped() {
        // Alternating results never reach rise=2 or fall=2.
        let mut t = Tracker::new(2, 2, Initial::Up);
        assert_eq!(run(&mut t, "-+-+-+-+-+-+"), vec![]);
        assert_eq!(t.is_up(), Some(true));
        let mut t = Tracker::new(2, 2, Initial::Down);
        assert_eq!(run(&mut t, "+-+-+-+-+-+-"), vec![]);
        assert_eq!(t.is_up(), Some(false));
        // With rise=fall=1 every change is a transition.
        let mut t = Tracker::new(1, 1, Initial::Up);
        assert_eq!(
            run(&mut t, "-+-+"),
            vec![(0, false), (1, true), (2, false), (3, true)]
        );
    }

    #[test]
    fn zero_thresholds_act_as_one() {
        let mut t = Tracker::new(0, 0, Initial::Up);
        assert_eq!((t.rise(), t.fall()), (1, 1));
        assert_eq!(run(&mut t, "-+"), vec![(0, false), (1, true)]);
    }

    #[test]
    fn failures_before_rising_do_not_count_after() {
        // Down, then up after rise; a following failure starts a new streak.
        let mut t = Tracker::new(1, 2, Initial::Down);
        assert_eq!(run(&mut t, "--+-+-"), vec![(2, true)]);
        assert_eq!(t.observe(false), Some(false));
    }

    #[test]
    fn initial_from_state() {
        assert_eq!(Initial::from(None), Initial::Unknown);
        assert_eq!(Initial::from(Some(true)), Initial::Up);
        assert_eq!(Initial::from(Some(false)), Initial::Down);
        assert_eq!(Initial::default(), Initial::Unknown);
    }

    /// Every result sequence up to length 8 for every rise/fall in 0..=4
    /// and every starting state agrees with the reference model, and a
    /// transition is reported exactly when the state changes.
    #[test]
    fn exhaustive_against_model() {
        for rise in 0..=4 {
            for fall in 0..=4 {
                for initial in [Initial::Unknown, Initial::Up, Initial::Down] {
                    for len in 0..=8u32 {
                        for bits in 0..(1u32 << len) {
                            let results: Vec<bool> = (0..len).map(|i| bits >> i & 1 == 1).collect();
                            let mut t = Tracker::new(rise, fall, initial);
                            for (i, &ok) in results.iter().enumerate() {
                                let before = t.is_up();
                                let change = t.observe(ok);
                                let after = model(rise, fall, initial, &results[..=i]);
                                assert_eq!(
                                    t.is_up(),
                                    after,
                                    "{rise} {fall} {initial:?} {results:?} at {i}"
                                );
                                let expected = (before != after).then(|| after.unwrap());
                                assert_eq!(change, expected);
                                let streak =
                                    results[..=i].iter().rev().take_while(|&&r| r == ok).count();
                                assert_eq!(t.consecutive() as usize, streak);
                            }
                        }
                    }
                }
            }
        }
    }
}
