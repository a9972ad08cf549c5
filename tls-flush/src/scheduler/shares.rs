//! How the urgencies share the link: a level more urgent than the default (`u=0` to `u=2`)
//! gets sixteen times the share of the next less urgent one; from the default down (`u=3`
//! to `u=7`), twice. Never all of it.
//!
//! Strict priority starves: Chromium 156 asks for a page's web font at `u=4` once the
//! page is laid out, and a bulk `fetch()` the page started earlier at `u=3, i`; served
//! strictly, the font waited for the whole download, and so did the page's `load` event
//! (the browser lab's article: 2.3x stock's load time with a 4 MiB fetch, 5.7x behind a
//! 20 MiB one; h2o, which serves urgencies strictly too, the same). Shared by weight, a
//! critical `u=0` response goes before millions of frames of `u=5` background, a `u=2`
//! hero image gets sixteen frames for each of a `u=3` download's, and the `u=4` font one
//! for every two of the download's. Where the steps come from (the browser lab, the 20 ms,
//! 20 Mbit/s tun link, 3 loads each, with body scheduling): 16x at every level gave the
//! article's LCP 0.45x stock's but its `load` 1.15x (the font, at a seventeenth of the link
//! behind the `u=3` video, ended last); 4x at every level, `load` 0.93x but LCP 0.70x, and
//! behind a 20 MiB download 0.57x; these steps, LCP 0.46x and 0.40x, `load` 0.94x and 0.90x.
//! The levels above the default are what a browser needs to render (the document, CSS,
//! visible images, its `fetch()`es); at and below it, what it does not need first, and
//! there a small response (the font) should not wait for a long one (the video).
//!
//! Self-clocked fair queueing over the eight levels (Golestani, 1994): a level that starts
//! waiting gets a finish tag of the virtual time plus one frame at its cost, each frame
//! served adds its length at the level's cost to its tag, the virtual time is the tag of
//! the level served last, and the waiting level with the lowest tag goes next (the more
//! urgent one on a tie). Levels that stop waiting keep no credit.
//!
//! Invariant: choosing is a pure function of the state and the waiting levels
//! ([`UrgencyShares::next`]); [`UrgencyShares::served`] then commits the same choice.

/// log2 of the share a level more urgent than the default has over the next less urgent
/// one: 16x (see the [module documentation](self)).
const URGENT_STEP_BITS: u32 = 4;
/// log2 of the share a level at or below the default has over the next less urgent one: 2x.
const BACKGROUND_STEP_BITS: u32 = 1;
/// RFC 9218's default urgency (§4.1): where the steps change, and below which incremental
/// responses go one at a time (see the scheduler).
pub(crate) const DEFAULT_URGENCY: u8 = 3;
/// Past this virtual time every tag is moved back by it, so that the tags (up to 2^30 per
/// frame at urgency 7) never saturate on a long-lived connection.
const REBASE_AT: u64 = 1 << 62;
/// The frame a level is charged for when it starts waiting: the largest DATA frame h2
/// sends by default (SETTINGS_MAX_FRAME_SIZE's initial value, RFC 9113 §6.5.2).
const NOMINAL_FRAME: u64 = 16_384;

/// The finish tags of the eight urgency levels (see the [module documentation](self)).
#[derive(Debug, Default, Clone)]
pub(crate) struct UrgencyShares {
    finish: [u64; 8],
    /// Levels that were waiting at the last frame served (bit `u`).
    waiting: u8,
    virtual_time: u64,
}

impl UrgencyShares {
    /// The level whose DATA goes next, of the `waiting` ones (bit `u` set: urgency `u` has
    /// DATA queued).
    pub(crate) fn next(&self, waiting: u8) -> Option<usize> {
        // One level waiting (nearly always): it goes, whatever the tags say. This runs
        // several times per record (every peek at what goes next).
        if waiting.is_power_of_two() {
            return Some(waiting.trailing_zeros() as usize);
        }
        (0..8)
            .filter(|&u| waiting & (1 << u) != 0)
            .min_by_key(|&u| (self.tag(u), u))
    }

    /// Commits a frame of `length` bytes served from `level`, chosen by [`Self::next`] among
    /// `waiting`.
    pub(crate) fn served(&mut self, waiting: u8, level: usize, length: u64) {
        for u in 0..8 {
            if waiting & (1 << u) != 0 {
                self.finish[u] = self.tag(u);
            }
        }
        self.waiting = waiting;
        self.virtual_time = self.virtual_time.max(self.finish[level]);
        self.finish[level] = self.finish[level].saturating_add(cost(level, length));
        if self.virtual_time > REBASE_AT {
            let base = self.virtual_time;
            self.finish
                .iter_mut()
                .for_each(|f| *f = f.saturating_sub(base));
            self.virtual_time = 0;
        }
    }

    /// Takes back the charge for `length` bytes of a frame [`Self::served`] committed from
    /// `level` that did not leave (the rest of a split frame, queued again).
    pub(crate) fn refund(&mut self, level: usize, length: u64) {
        self.finish[level] = self.finish[level].saturating_sub(cost(level, length));
    }

    /// Level `u`'s finish tag: its own while it keeps waiting, else the virtual time plus
    /// one nominal frame; a level more urgent than the default starts at the virtual time
    /// itself. A frame popped and queued again (a split frame's rest, or one a record had
    /// no room for) is refunded, which leaves its level's tag at the virtual time: one
    /// nominal frame more put a `u=1` answer queued meanwhile behind that rest, and the
    /// rest was waiting for the window room kept for the answer (the browser lab's demo
    /// page: the answer's last bytes a round trip late).
    fn tag(&self, u: usize) -> u64 {
        if self.waiting & (1 << u) != 0 {
            self.finish[u]
        } else if u < usize::from(DEFAULT_URGENCY) {
            self.finish[u].max(self.virtual_time)
        } else {
            self.finish[u]
                .max(self.virtual_time)
                .saturating_add(cost(u, NOMINAL_FRAME))
        }
    }
}

/// log2 of the cost of a byte at urgency `u` (7 for anything larger): the steps above
/// summed, 0 for `u=0`, 12 for `u=3`, 16 for `u=7`.
pub(crate) fn cost_bits(u: u8) -> u32 {
    let u = u32::from(u.min(7));
    let default = u32::from(DEFAULT_URGENCY);
    URGENT_STEP_BITS * u.min(default) + BACKGROUND_STEP_BITS * u.saturating_sub(default)
}

/// `length` bytes at level `u`'s cost: `2^cost_bits(u)` per byte.
fn cost(u: usize, length: u64) -> u64 {
    length.saturating_mul(1 << cost_bits(u as u8))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves `frames` frames of 16 KiB while `waiting` stays as it is; the levels served.
    fn serve(shares: &mut UrgencyShares, waiting: u8, frames: usize) -> Vec<usize> {
        (0..frames)
            .map(|_| {
                let level = shares.next(waiting).expect("a waiting level");
                shares.served(waiting, level, NOMINAL_FRAME);
                level
            })
            .collect()
    }

    #[test]
    fn one_level_step_above_the_default_gets_a_seventeenth_of_the_frames() {
        let mut shares = UrgencyShares::default();
        let served = serve(&mut shares, 0b1100, 170);
        let less_urgent = served.iter().filter(|&&u| u == 3).count();
        // Sixteen for one, after a first frame of its own: the more urgent level starts at
        // the virtual time, the less urgent one a nominal frame after it.
        assert_eq!(less_urgent, 9, "{served:?}");
        assert!(
            served[..17].iter().all(|&u| u == 2),
            "the more urgent level first"
        );
        assert_eq!(served[17], 3);
    }

    #[test]
    fn one_level_step_below_the_default_gets_a_third_of_the_frames() {
        let mut shares = UrgencyShares::default();
        let served = serve(&mut shares, 0b11000, 150);
        let less_urgent = served.iter().filter(|&&u| u == 4).count();
        assert_eq!(less_urgent, 50, "{served:?}");
        assert_eq!(served[..2], [3, 3], "the more urgent level first");
    }

    /// A frame served and queued again (a record had no room for it) is refunded; a more
    /// urgent level that starts waiting meanwhile still goes before it.
    #[test]
    fn a_more_urgent_level_goes_before_a_refunded_frame() {
        let mut shares = UrgencyShares::default();
        let download = 1 << 3;
        shares.served(download, 3, NOMINAL_FRAME);
        shares.refund(3, NOMINAL_FRAME);
        assert_eq!(shares.next(download | 1 << 1), Some(1));
    }

    #[test]
    fn critical_goes_before_a_long_background() {
        let mut shares = UrgencyShares::default();
        // u=5 costs 2^14 per byte: sixteen thousand frames (256 MiB) of u=0 first.
        let served = serve(&mut shares, 0b100001, 16_000);
        assert!(served.iter().all(|&u| u == 0));
    }

    #[test]
    fn tags_are_rebased_before_they_saturate() {
        // Urgency 7 alone: 2^30 per frame, past 2^62 after four billion frames; start
        // near the end instead.
        let mut shares = UrgencyShares {
            virtual_time: REBASE_AT - 4 * cost(7, NOMINAL_FRAME),
            ..UrgencyShares::default()
        };
        serve(&mut shares, 0b1000_0000, 64);
        assert!(shares.virtual_time < REBASE_AT);
        // And the shares still hold: urgency 6 gets two frames for each of urgency 7's.
        let served = serve(&mut shares, 0b1100_0000, 150);
        assert_eq!(served.iter().filter(|&&u| u == 7).count(), 50, "{served:?}");
    }

    #[test]
    fn a_level_that_stopped_waiting_keeps_no_credit() {
        let mut shares = UrgencyShares::default();
        // Urgency 5 alone for a long time, then urgency 0 arrives: urgency 0 goes first.
        serve(&mut shares, 0b100000, 500);
        assert_eq!(serve(&mut shares, 0b100001, 3), [0, 0, 0]);
        // Urgency 0 alone for a while, then urgency 1 arrives: its first frame comes after
        // sixteen of urgency 0, not after the 500 it did not wait for.
        let mut shares = UrgencyShares::default();
        serve(&mut shares, 0b1, 500);
        let served = serve(&mut shares, 0b11, 17);
        assert_eq!(served.iter().filter(|&&u| u == 1).count(), 1, "{served:?}");
    }

    #[test]
    fn nothing_waiting_chooses_nothing() {
        assert_eq!(UrgencyShares::default().next(0), None);
    }
}
