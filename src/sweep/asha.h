// ASHA, asynchronous successive halving (Li et al. 2020, "A System for Massively Parallel Hyperparameter
// Tuning"): a pure function of the results recorded so far (docs/sweep.md). A trial that finished rung k is
// promoted to rung k+1 when it is in the top floor(n_k / eta) of the n_k trials that have reached rung k, by
// validation loss at that rung; promotions from the highest rung come first.
#pragma once

#include <string>
#include <vector>

namespace tern::sweep {

struct AshaTrial {
  int id = 0;
  std::vector<double> losses;  // validation loss at each rung reached: losses[k] at rung k
  bool waiting = false;  // finished rung losses.size()-1 and waits for a decision (not running, not ended)
};

struct Promotion {
  int id = 0;
  int to_rung = 0;
};

// The promotable trials, best first: highest rung first, then lowest loss (ties: lowest id). `rungs` is
// the number of rungs; a trial at the last rung is finished, never promoted.
std::vector<Promotion> AshaPromotions(const std::vector<AshaTrial>& trials, int rungs, int eta);

// Why a waiting trial was not promoted, once nothing can change the rung's ranking (no trial running, none
// left to start): "rung 1 (8 steps): loss 2.91 is 3rd of 4, only the top 2 go on" (`what` names the value).
std::string AshaStopReason(const std::vector<AshaTrial>& trials, int id, int eta, int rung_steps,
                           const std::string& what = "loss");

}  // namespace tern::sweep
