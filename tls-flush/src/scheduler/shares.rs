//! How the urgencies share the link: each urgency level gets sixteen times the share of
//! the next less urgent one, instead of all of it.
//!
//! Strict priority starves: Chromium 156 asks for a page's web font at `u=4` once the
//! page is laid out, and a bulk `fetch()` the page started earlier at `u=3, i`; served
//! strictly, the font waited for the whole download, and so did the page's `load` event
//! (the browser lab's article: 2.3x stock's load time with a 4 MiB fetch, 5.7x behind a
//! 20 MiB one; h2o, which serves urgencies strictly too, the same). Shared by weight, a
//! level `d` steps less urgent gets one byte for every `16^d` of the more urgent one: the
//! font gets a frame for every sixteen of the download, a critical `u=0` response goes
//! before a million frames of `u=5` background. Measured on the 20 ms, 20 Mbit/s tun link
//! (4 loads each): the article's `load` at 0.96x stock's and its LCP at 0.42x; behind the
//! 20 MiB download 0.94x and 0.88x; a step of 4x instead gave LCP 0.64x and 0.90x.
//!
//! Self-clocked fair queueing over the eight levels (Golestani, 1994): a level that starts
//! waiting gets a finish tag of the virtual time plus one frame at its cost, each frame
//! served adds its length at the level's cost to its tag, the virtual time is the tag of
//! the level served last, and the waiting level with the lowest tag goes next (the more
//! urgent one on a tie). Levels that stop waiting keep no credit.
//!
//! Invariant: choosing is a pure function of the state and the waiting levels
//! ([`UrgencyShares::next`]); [`UrgencyShares::served`] then commits the same choice.

/// log2 of the share one urgency level has over the next less urgent one: 16x (see the
/// [module documentation](self) for 4x).
pub(crate) const SHARE_STEP_BITS: u32 = 4;
/// Past this virtual time every tag is moved back by it, so that the tags (up to 2^42 per
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

    /// Level `u`'s finish tag: its own while it keeps waiting, else the virtual time plus
    /// one nominal frame.
    fn tag(&self, u: usize) -> u64 {
        if self.waiting & (1 << u) != 0 {
            self.finish[u]
        } else {
            self.finish[u]
                .max(self.virtual_time)
                .saturating_add(cost(u, NOMINAL_FRAME))
        }
    }
}

/// `length` bytes at level `u`'s cost: `16^u` per byte.
fn cost(u: usize, length: u64) -> u64 {
    length.saturating_mul(1 << (SHARE_STEP_BITS * u as u32))
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
    fn one_level_step_gets_a_seventeenth_of_the_frames() {
        let mut shares = UrgencyShares::default();
        let served = serve(&mut shares, 0b11000, 170);
        let less_urgent = served.iter().filter(|&&u| u == 4).count();
        assert_eq!(less_urgent, 10, "{served:?}");
        assert!(
            served[..16].iter().all(|&u| u == 3),
            "the more urgent level first"
        );
    }

    #[test]
    fn critical_goes_before_a_long_background() {
        let mut shares = UrgencyShares::default();
        let served = serve(&mut shares, 0b100001, 100_000);
        assert!(served.iter().all(|&u| u == 0));
    }

    #[test]
    fn tags_are_rebased_before_they_saturate() {
        let mut shares = UrgencyShares::default();
        // Urgency 7 alone: 2^42 per frame, past 2^62 after a million frames.
        serve(&mut shares, 0b1000_0000, 1 << 21);
        assert!(shares.virtual_time < REBASE_AT);
        // And the shares still hold: urgency 6 gets sixteen frames for each of urgency 7's.
        let served = serve(&mut shares, 0b1100_0000, 170);
        assert_eq!(served.iter().filter(|&&u| u == 7).count(), 10, "{served:?}");
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
