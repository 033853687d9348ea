#include "cli/speculative_flags.h"

namespace tern::cli {

void AddSpeculativeOptions(CLI::App* sub, SpeculativeOptions* spec) {
  sub->add_option(
         "--speculative-tokens", spec->num_tokens,
         "speculative decoding by prompt lookup (vLLM's ngram method): a sequence whose last tokens "
         "occurred earlier in its prompt or output drafts up to this many of the tokens that followed "
         "them, and one forward checks them all. The output is the same token for token; it comes in "
         "fewer forwards when answers repeat their context (code edits, quotes, extraction). 0 = off "
         "(docs/serving.md)")
      ->capture_default_str()
      ->check(CLI::Range(0, 16));
  sub->add_option("--prompt-lookup-max", spec->lookup_max, "the longest suffix matched for a draft")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  sub->add_option("--prompt-lookup-min", spec->lookup_min,
                  "the shortest suffix matched for a draft (1 drafts more often and is right less often)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  sub->add_option(
         "--speculative-max-batch", spec->max_batch,
         "no drafts while more sequences than this decode: a full batch is compute-bound and pays for "
         "every drafted row (0 = no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
}

}  // namespace tern::cli
