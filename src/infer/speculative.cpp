#include "infer/speculative.h"

#include <algorithm>

namespace tern {

void ProposeByLookup(const int32_t* tokens, int n, int lookup_min, int lookup_max, int max_draft,
                     std::vector<int32_t>* draft) {
  draft->clear();
  if (max_draft <= 0) return;
  lookup_min = std::max(lookup_min, 1);
  for (int len = std::min(lookup_max, n - 1); len >= lookup_min; len--) {
    const int32_t* suffix = tokens + n - len;
    // The latest earlier occurrence: it starts at most at n - len - 1, so at least one token follows it.
    for (int start = n - len - 1; start >= 0; start--) {
      if (!std::equal(suffix, suffix + len, tokens + start)) continue;
      // tokens[start + len ...] followed the match; past the end the draft continues from itself, which
      // repeats the match's continuation as the sequence would if the pattern went on.
      for (int i = 0; i < max_draft; i++) {
        const int at = start + len + i;
        draft->push_back(at < n ? tokens[at] : (*draft)[at - n]);
      }
      return;
    }
  }
}

}  // namespace tern
