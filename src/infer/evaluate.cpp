#include "infer/evaluate.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>

#include "data/loader.h"
#include "fmt/format.h"

namespace tern {
namespace {

constexpr int kBlock = 16;        // tokens per KV block
constexpr int kRowBudget = 2048;  // rows (tokens) per forward: the windows of one forward share it

// Rows [start, n) of a sequence's tokens into a forward, positions start.., their keys and values into new
// blocks from *next_block; `prefix` are the blocks that already hold positions [0, start) (start is a whole
// number of blocks). Rows at positions >= first_logit have their logits wanted.
void AppendRows(const int32_t* tokens, int start, int n, int first_logit, const std::vector<int32_t>& prefix,
                int* next_block, int max_blocks, ForwardBatch* b) {
  const int row = b->N(), own = (n - start + kBlock - 1) / kBlock;
  b->seqs.insert(b->seqs.end(), {row, n - start, n});
  std::vector<int32_t> table = prefix;
  for (int j = 0; j < own; j++) table.push_back(*next_block + j);
  table.resize(max_blocks, 0);
  b->block_tables.insert(b->block_tables.end(), table.begin(), table.end());
  for (int p = start; p < n; p++) {
    b->tokens.push_back(tokens[p]);
    b->positions.push_back(p);
    b->slots.push_back((*next_block + (p - start) / kBlock) * kBlock + (p - start) % kBlock);
    if (p >= first_logit) b->logit_rows.push_back(b->N() - 1);
  }
  *next_block += own;
}

// One forward's inputs: `count` sequences of T tokens each, every row's logits wanted.
void BuildBatch(const int32_t* tokens, int count, int T, int max_blocks, ForwardBatch* b) {
  b->Clear();
  int next_block = 0;
  for (int s = 0; s < count; s++) AppendRows(tokens + s * T, 0, T, 0, {}, &next_block, max_blocks, b);
}

// log softmax(row)[target], in double.
double LogProb(const float* row, int V, int target) {
  const float mx = *std::max_element(row, row + V);
  double sum = 0;
  for (int v = 0; v < V; v++) sum += std::exp(static_cast<double>(row[v]) - mx);
  return static_cast<double>(row[target]) - mx - std::log(sum);
}

// Sum over rows of log p(targets[r]) for the N rows of `logits`; a target < 0 (a loss mask's, `tern prepare
// --chat`) is skipped.
double SumLogProbs(const float* logits, const int32_t* targets, int N, int V) {
  double total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static)
  for (int r = 0; r < N; r++)
    if (targets[r] >= 0) total += LogProb(logits + static_cast<size_t>(r) * V, V, targets[r]);
  return total;
}

Result<std::unique_ptr<InferenceModel>> MakeModel(Backend* backend, const GptConfig& cfg,
                                                  const std::vector<float>& params, int T, int windows,
                                                  Quantize quantize) {
  InferenceModelOptions o;
  o.quantize = quantize;
  o.block_size = kBlock;
  o.num_blocks = windows * ((T + kBlock - 1) / kBlock);
  o.max_rows = windows * T;
  o.max_seqs = windows;
  o.max_logit_rows = windows * T;
  return InferenceModel::Create(backend, cfg, params, o);
}

}  // namespace

double EvalResult::perplexity() const {
  return std::exp(loss);
}

Result<EvalResult> EvaluateShards(Backend* backend, const GptConfig& cfg, const std::vector<float>& params,
                                  const std::vector<std::string>& shards, const EvalOptions& options) {
  const int T = options.seq_len > 0 ? options.seq_len : cfg.block_size;
  if (T > cfg.block_size) {
    return Status::InvalidArgument(
        fmt::format("--seq-len {} is longer than the model's context of {} tokens", T, cfg.block_size));
  }
  if (options.max_windows < 0) return Status::InvalidArgument("the number of windows must be positive");
  const int per_forward = std::max(1, kRowBudget / T);
  TERN_ASSIGN_OR_RETURN(auto loader, DataLoader::Open(shards, 1, T, /*seed=*/0, /*shuffle=*/false));
  if (static_cast<int64_t>(loader->vocab_size()) > cfg.vocab_size) {
    return Status::InvalidArgument(fmt::format(
        "the shards' vocabulary has {} tokens, the model's {}: they were prepared with another tokenizer",
        loader->vocab_size(), cfg.vocab_size));
  }
  int64_t n = static_cast<int64_t>(loader->windows_per_epoch());
  if (options.max_windows > 0) n = std::min(n, options.max_windows);
  const int k = static_cast<int>(std::min<int64_t>(per_forward, n));
  TERN_ASSIGN_OR_RETURN(auto model, MakeModel(backend, cfg, params, T, k, options.quantize));

  std::vector<int32_t> inputs, targets;
  ForwardBatch fb;
  Batch batch;
  double total = 0;
  int64_t learned = 0;  // targets scored: all of them, but for loss masks
  for (int64_t done = 0; done < n;) {
    const int count = static_cast<int>(std::min<int64_t>(k, n - done));
    inputs.clear();
    targets.clear();
    for (int i = 0; i < count; i++) {
      TERN_RETURN_IF_ERROR(loader->Next(&batch));
      inputs.insert(inputs.end(), batch.inputs.begin(), batch.inputs.end());
      targets.insert(targets.end(), batch.targets.begin(), batch.targets.end());
    }
    BuildBatch(inputs.data(), count, T, model->max_blocks_per_seq(), &fb);
    const float* logits = model->Forward(fb);
    total += SumLogProbs(logits, targets.data(), count * T, cfg.vocab_size);
    learned += LearnedTargets(targets);
    done += count;
  }
  EvalResult r;
  r.windows = n;
  r.tokens = learned;
  r.loss = learned > 0 ? -total / static_cast<double>(learned) : 0.0;
  return r;
}

Result<std::vector<PromptScore>> ScorePrompts(Backend* backend, const GptConfig& cfg,
                                              const std::vector<float>& params, const Tokenizer& tokenizer,
                                              const std::vector<std::string>& prompts, Quantize quantize) {
  std::vector<PromptScore> out;
  if (prompts.empty()) return out;
  TERN_ASSIGN_OR_RETURN(auto model, MakeModel(backend, cfg, params, cfg.block_size, 1, quantize));
  ForwardBatch fb;
  for (size_t i = 0; i < prompts.size(); i++) {
    std::vector<int32_t> tokens{tokenizer.eos_id()};
    tokenizer.EncodeAppend(prompts[i], &tokens);
    const int P = static_cast<int>(tokens.size()) - 1;  // tokens scored
    if (P < 1) return Status::InvalidArgument(fmt::format("prompt {} is empty", i + 1));
    if (P > cfg.block_size) {
      return Status::InvalidArgument(
          fmt::format("prompt {} has {} tokens; the model's context is {}", i + 1, P, cfg.block_size));
    }
    BuildBatch(tokens.data(), 1, P, model->max_blocks_per_seq(), &fb);
    const float* logits = model->Forward(fb);
    PromptScore s;
    s.text = prompts[i];
    s.tokens = P;
    s.logprob = SumLogProbs(logits, tokens.data() + 1, P, cfg.vocab_size);
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

// One ending appended to its context: the tokens a forward reads and the rows whose targets are scored.
struct ChoiceSeq {
  std::vector<int32_t> tokens;  // context (eos first) + ending; the forward reads all but the last
  int scored_from = 0;          // tokens[scored_from..] are the ending's, each predicted by the row before
  int item = 0, ending = 0;
};

bool EndsWithSpace(const std::string& s) {
  return !s.empty() && std::isspace(static_cast<unsigned char>(s.back()));
}
bool StartsWithSpace(const std::string& s) {
  return !s.empty() && std::isspace(static_cast<unsigned char>(s.front()));
}

// The items of one group of forwards: the contexts' shared blocks first (forward 1, no logits), then every
// ending's own rows (forward 2) over its item's shared blocks: bitwise the logits of running each ending
// with its whole context (row-independent ops; the cached keys and values are the ones it would compute).
void BuildChoiceBatches(const std::vector<ChoiceSeq>& seqs, size_t begin, size_t end,
                        const std::vector<int>& shared, int max_blocks, ForwardBatch* prefix,
                        ForwardBatch* endings) {
  prefix->Clear();
  endings->Clear();
  int next_block = 0;
  std::vector<int32_t> blocks;  // the shared blocks of the item in progress
  for (size_t k = begin; k < end; k++) {
    const ChoiceSeq& s = seqs[k];
    const int P = shared[s.item];
    if (k == begin || seqs[k - 1].item != s.item) {
      blocks.clear();
      if (P > 0) {
        const int first = next_block;
        AppendRows(s.tokens.data(), 0, P, P, {}, &next_block, max_blocks, prefix);
        for (int j = first; j < next_block; j++) blocks.push_back(j);
      }
    }
    AppendRows(s.tokens.data(), P, static_cast<int>(s.tokens.size()) - 1, s.scored_from - 1, blocks,
               &next_block, max_blocks, endings);
  }
}

}  // namespace

double ChoiceResult::StdErr(double p) const {
  return items > 1 ? std::sqrt(p * (1 - p) / static_cast<double>(items - 1)) : 0;
}

Result<ChoiceResult> ScoreChoices(Backend* backend, const GptConfig& cfg, const std::vector<float>& params,
                                  const Tokenizer& tokenizer, const std::vector<ChoiceItem>& items,
                                  Quantize quantize, const ChoiceProgress& progress, bool share_prefix) {
  ChoiceResult out;
  out.items = static_cast<int64_t>(items.size());
  out.per_item.resize(items.size());
  // Every ending's sequence, the context cut from the front where the two do not fit the context.
  std::vector<ChoiceSeq> seqs;
  for (size_t i = 0; i < items.size(); i++) {
    const ChoiceItem& it = items[i];
    std::vector<int32_t> ctx{tokenizer.eos_id()};
    tokenizer.EncodeAppend(it.context, &ctx);
    for (size_t e = 0; e < it.endings.size(); e++) {
      const bool space = !it.context.empty() && !EndsWithSpace(it.context) && !StartsWithSpace(it.endings[e]);
      const std::vector<int32_t> end = tokenizer.Encode(space ? " " + it.endings[e] : it.endings[e]);
      const int E = static_cast<int>(end.size());
      if (E < 1 || E > cfg.block_size)
        return Status::InvalidArgument(fmt::format(
            "item {} ending {} has {} tokens; the model's context is {}", i + 1, e + 1, E, cfg.block_size));
      // The forward reads all but the last token: ctx + E - 1 <= block_size.
      const int keep = std::min(static_cast<int>(ctx.size()), cfg.block_size + 1 - E);
      if (keep < static_cast<int>(ctx.size())) out.per_item[i].truncated = true;
      ChoiceSeq s;
      s.tokens.assign(ctx.end() - keep, ctx.end());
      s.scored_from = keep;
      s.tokens.insert(s.tokens.end(), end.begin(), end.end());
      s.item = static_cast<int>(i);
      s.ending = static_cast<int>(e);
      seqs.push_back(std::move(s));
    }
    out.truncated += out.per_item[i].truncated;
    out.per_item[i].logprob.assign(it.endings.size(), 0);
    out.per_item[i].tokens.assign(it.endings.size(), 0);
  }
  // Each item's context runs once, in whole KV blocks, and its endings attend to those (a prefix cache):
  // shared[i] tokens of it, the whole blocks before its last token (whose logit scores the first token of
  // every ending). None when an ending cut the context to fit, or share_prefix is off.
  std::vector<int> shared(items.size(), 0);
  if (share_prefix) {
    for (size_t k = 0; k < seqs.size(); k++) {
      const ChoiceSeq& q = seqs[k];
      const int P = (q.scored_from - 1) / kBlock * kBlock;
      shared[q.item] = out.per_item[q.item].truncated ? 0 : P;
    }
  }
  // Forwards of whole items up to the row budget (an item larger than it alone): the shared rows in one, the
  // endings' own rows in the next.
  std::vector<std::pair<size_t, size_t>> groups;  // [begin, end) into seqs
  int max_rows = 0, max_seqs = 0, max_logits = 0, max_blocks = 0;
  for (size_t at = 0; at < seqs.size();) {
    size_t end = at;
    int rows1 = 0, rows2 = 0, logits = 0, blocks = 0, count = 0;
    while (end < seqs.size()) {
      size_t item_end = end;  // the next item's sequences
      const int P = shared[seqs[end].item];
      int r2 = 0, l = 0, b = P / kBlock;
      while (item_end < seqs.size() && seqs[item_end].item == seqs[end].item) {
        const int own = static_cast<int>(seqs[item_end].tokens.size()) - 1 - P;
        r2 += own;
        l += static_cast<int>(seqs[item_end].tokens.size()) - seqs[item_end].scored_from;
        b += (own + kBlock - 1) / kBlock;
        item_end++;
      }
      if (end > at && (rows1 + P > kRowBudget || rows2 + r2 > kRowBudget)) break;
      rows1 += P;
      rows2 += r2;
      logits += l;
      blocks += b;
      count += static_cast<int>(item_end - end);
      end = item_end;
    }
    groups.push_back({at, end});
    max_rows = std::max({max_rows, rows1, rows2});
    max_seqs = std::max(max_seqs, count);
    max_logits = std::max(max_logits, logits);
    max_blocks = std::max(max_blocks, blocks);
    at = end;
  }
  InferenceModelOptions o;
  o.quantize = quantize;
  o.block_size = kBlock;
  o.num_blocks = max_blocks;
  o.max_rows = max_rows;
  o.max_seqs = std::max(2, max_seqs);  // more than one: the batched kernels, whatever the group
  o.max_logit_rows = std::max(max_logits, o.max_seqs);
  TERN_ASSIGN_OR_RETURN(auto model, InferenceModel::Create(backend, cfg, params, o));

  ForwardBatch prefix, endings;
  std::vector<int32_t> targets;
  for (const auto& [begin, end] : groups) {
    targets.clear();
    for (size_t k = begin; k < end; k++)
      targets.insert(targets.end(), seqs[k].tokens.begin() + seqs[k].scored_from, seqs[k].tokens.end());
    BuildChoiceBatches(seqs, begin, end, shared, model->max_blocks_per_seq(), &prefix, &endings);
    if (prefix.N() > 0) model->Forward(prefix);  // keys and values only
    const float* logits = model->Forward(endings);
    size_t row = 0;
    for (size_t k = begin; k < end; k++) {
      const ChoiceSeq* s = &seqs[k];
      const int E = static_cast<int>(s->tokens.size()) - s->scored_from;
      ChoiceItemScore& sc = out.per_item[s->item];
      sc.logprob[s->ending] =
          SumLogProbs(logits + row * cfg.vocab_size, targets.data() + row, E, cfg.vocab_size);
      sc.tokens[s->ending] = E;
      row += E;
    }
    // The group's items are whole: decide them.
    for (int i = seqs[begin].item; i <= seqs[end - 1].item; i++) {
      ChoiceItemScore& sc = out.per_item[i];
      const auto per_byte = [&](size_t k) {
        return sc.logprob[k] / static_cast<double>(items[i].endings[k].size());
      };
      for (size_t e = 1; e < sc.logprob.size(); e++) {
        if (sc.logprob[e] > sc.logprob[sc.predicted]) sc.predicted = static_cast<int>(e);
        if (per_byte(e) > per_byte(sc.predicted_norm)) sc.predicted_norm = static_cast<int>(e);
      }
      out.correct += sc.predicted == items[i].label;
      out.correct_norm += sc.predicted_norm == items[i].label;
    }
    if (progress) progress(seqs[end - 1].item + 1, out.correct);
  }
  return out;
}

}  // namespace tern
