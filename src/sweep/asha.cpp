#include "sweep/asha.h"

#include <algorithm>

#include <fmt/format.h>

namespace tern::sweep {
namespace {

// The trials that reached `rung`, best first.
std::vector<const AshaTrial*> Ranked(const std::vector<AshaTrial>& trials, int rung) {
  std::vector<const AshaTrial*> at;
  for (const AshaTrial& t : trials)
    if (static_cast<int>(t.losses.size()) > rung) at.push_back(&t);
  std::sort(at.begin(), at.end(), [rung](const AshaTrial* a, const AshaTrial* b) {
    if (a->losses[rung] != b->losses[rung]) return a->losses[rung] < b->losses[rung];
    return a->id < b->id;
  });
  return at;
}

}  // namespace

std::vector<Promotion> AshaPromotions(const std::vector<AshaTrial>& trials, int rungs, int eta) {
  std::vector<Promotion> out;
  for (int k = rungs - 2; k >= 0; k--) {
    const std::vector<const AshaTrial*> ranked = Ranked(trials, k);
    const size_t top = ranked.size() / static_cast<size_t>(eta);
    for (size_t i = 0; i < top; i++) {
      const AshaTrial* t = ranked[i];
      if (t->waiting && static_cast<int>(t->losses.size()) == k + 1) out.push_back({t->id, k + 1});
    }
  }
  return out;
}

std::string AshaStopReason(const std::vector<AshaTrial>& trials, int id, int eta, int rung_steps,
                           const std::string& what) {
  for (const AshaTrial& t : trials) {
    if (t.id != id || t.losses.empty()) continue;
    const int k = static_cast<int>(t.losses.size()) - 1;
    const std::vector<const AshaTrial*> ranked = Ranked(trials, k);
    size_t place = 0;
    while (place < ranked.size() && ranked[place]->id != id) place++;
    return fmt::format("rung {} ({} steps): {} {:.4f} is #{} of {}, only the top {} go on", k, rung_steps,
                       what, t.losses[k], place + 1, ranked.size(), ranked.size() / static_cast<size_t>(eta));
  }
  return "no result";
}

}  // namespace tern::sweep
