// Host-side bookkeeping of the paged KV cache (the memory itself lives in InferenceModel): which blocks are
// free, how many sequences hold each one, and the prefix cache.
//
// A block holds the keys and values of block_size consecutive tokens of one sequence. Blocks are
// reference-counted: sequences whose prompts start with the same tokens share the blocks of that prefix.
// A full block can be *published* under the hash chain of its contents, h_i = xxh3(tokens of block i, seed
// h_{i-1}), so that a later prompt with the same first i+1 blocks finds it. When its last holder lets go, a
// published block is kept (cached-free, in LRU order) until a fresh block is needed and none is left; only
// then is it evicted and its hash forgotten. Lookups compare the stored tokens as well as the hash, so a
// hash collision can never hand out the wrong keys.
//
// Admission control reserves blocks: a request is admitted only when the blocks it may need (prompt plus
// max_tokens) can be reserved, so a running sequence never finds the pool empty. Not thread-safe: the
// engine thread owns it.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace tern {

class BlockManager {
 public:
  BlockManager(int num_blocks, int block_size);

  int block_size() const { return block_size_; }
  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int used() const { return used_; }                                 // held by at least one sequence
  int cached_free() const { return static_cast<int>(lru_.size()); }  // held by none, keep a cached prefix
  int free() const { return static_cast<int>(free_.size()); }        // hold nothing
  int reserved() const { return reserved_; }
  // Blocks a new reservation can still get: free and cached-free blocks not already promised.
  int available() const { return free() + cached_free() - reserved_; }

  // The longest published prefix of tokens[0..n), in whole blocks and at most max_blocks of them. The blocks
  // found are acquired (their holders count +1). *hashes receives each block's chain hash. root: the chain's
  // parent hash before the first block (0; a namespace, such as a LoRA adapter's, whose blocks must not mix
  // with others: publish its first block with the same parent).
  std::vector<int32_t> AcquirePrefix(const int32_t* tokens, int n, int max_blocks,
                                     std::vector<uint64_t>* hashes, uint64_t root = 0);

  // The blocks AcquirePrefix would find now, without acquiring them or counting the lookups (planning).
  std::vector<int32_t> FindPrefix(const int32_t* tokens, int n, int max_blocks, uint64_t root = 0) const;
  // How many sequences hold `block` (0: free or cached-free).
  int holders(int32_t block) const { return blocks_[block].refs; }

  // Promises n blocks to a sequence; false (and nothing promised) when fewer are available.
  bool Reserve(int n);
  void Unreserve(int n);
  // Turns one promised block into a real one: a free block, else the least recently used cached-free one.
  int32_t AllocateReserved();
  // The holder lets go of `block`.
  void Release(int32_t block);

  // Publishes full block `block` holding tokens[0..block_size) after the prefix whose chain hash is
  // parent_hash (the chain's root, 0 by default, for the first block). Returns the block's chain hash. If an
  // identical block is already published, this one stays private (it is freed normally) and the hash is
  // returned all the same.
  uint64_t Publish(int32_t block, uint64_t parent_hash, const int32_t* tokens);

  // Prefix-cache counters since construction: blocks looked up, blocks found.
  uint64_t prefix_queries() const { return prefix_queries_; }
  uint64_t prefix_hits() const { return prefix_hits_; }

  // Checks the counts against the blocks (tests): every block is in exactly one state.
  bool Consistent() const;

 private:
  struct Block {
    int refs = 0;
    bool published = false;
    uint64_t hash = 0, parent_hash = 0;
    std::vector<int32_t> tokens;           // what it holds, when published
    std::list<int32_t>::iterator lru_pos;  // valid while cached-free
  };
  uint64_t ChainHash(uint64_t parent_hash, const int32_t* tokens) const;
  // The published block holding tokens[0..block_size) after the chain `parent` (-1: none); *hash gets its
  // hash.
  int32_t Lookup(uint64_t parent, const int32_t* tokens, uint64_t* hash) const;

  int block_size_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block is reused first
  std::list<int32_t> lru_;     // cached-free blocks, least recently used first
  std::unordered_map<uint64_t, int32_t> published_;
  int used_ = 0, reserved_ = 0;
  uint64_t prefix_queries_ = 0, prefix_hits_ = 0;
};

}  // namespace tern
