#include "infer/kv_cache.h"

#include <xxhash.h>

#include <cassert>
#include <cstring>

namespace tern {

BlockManager::BlockManager(int num_blocks, int block_size) : block_size_(block_size), blocks_(num_blocks) {
  free_.reserve(num_blocks);
  for (int b = num_blocks - 1; b >= 0; b--) free_.push_back(b);  // block 0 is handed out first
}

uint64_t BlockManager::ChainHash(uint64_t parent_hash, const int32_t* tokens) const {
  return XXH3_64bits_withSeed(tokens, static_cast<size_t>(block_size_) * sizeof(int32_t), parent_hash);
}

int32_t BlockManager::Lookup(uint64_t parent, const int32_t* tokens, uint64_t* hash) const {
  *hash = ChainHash(parent, tokens);
  const auto it = published_.find(*hash);
  if (it == published_.end()) return -1;
  const Block& b = blocks_[it->second];
  if (b.parent_hash != parent || std::memcmp(b.tokens.data(), tokens, block_size_ * sizeof(int32_t)) != 0)
    return -1;
  return it->second;
}

std::vector<int32_t> BlockManager::AcquirePrefix(const int32_t* tokens, int n, int max_blocks,
                                                 std::vector<uint64_t>* hashes, uint64_t root) {
  std::vector<int32_t> found;
  hashes->clear();
  uint64_t parent = root;
  const int full = std::min(n / block_size_, max_blocks);
  for (int i = 0; i < full; i++) {
    uint64_t h = 0;
    prefix_queries_++;
    const int32_t id = Lookup(parent, tokens + static_cast<size_t>(i) * block_size_, &h);
    if (id < 0) break;
    Block& b = blocks_[id];
    if (b.refs == 0 && available() <= 0) break;  // every cached-free block is promised to running sequences
    prefix_hits_++;
    if (b.refs == 0) {
      lru_.erase(b.lru_pos);
      used_++;
    }
    b.refs++;
    found.push_back(id);
    hashes->push_back(h);
    parent = h;
  }
  return found;
}

std::vector<int32_t> BlockManager::FindPrefix(const int32_t* tokens, int n, int max_blocks,
                                              uint64_t root) const {
  std::vector<int32_t> found;
  uint64_t parent = root;
  const int full = std::min(n / block_size_, max_blocks);
  for (int i = 0; i < full; i++) {
    const int32_t id = Lookup(parent, tokens + static_cast<size_t>(i) * block_size_, &parent);
    if (id < 0) break;
    found.push_back(id);
  }
  return found;
}

bool BlockManager::Reserve(int n) {
  if (n > available()) return false;
  reserved_ += n;
  return true;
}

void BlockManager::Unreserve(int n) {
  assert(n <= reserved_);
  reserved_ -= n;
}

int32_t BlockManager::AllocateReserved() {
  assert(reserved_ > 0);
  reserved_--;
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    assert(!lru_.empty());
    id = lru_.front();  // evict the least recently used cached prefix
    lru_.pop_front();
    Block& b = blocks_[id];
    published_.erase(b.hash);
    b.published = false;
    b.tokens.clear();
  }
  blocks_[id].refs = 1;
  used_++;
  return id;
}

void BlockManager::Release(int32_t block) {
  Block& b = blocks_[block];
  assert(b.refs > 0);
  if (--b.refs > 0) return;
  used_--;
  if (b.published) {
    lru_.push_back(block);
    b.lru_pos = std::prev(lru_.end());
  } else {
    free_.push_back(block);
  }
}

uint64_t BlockManager::Publish(int32_t block, uint64_t parent_hash, const int32_t* tokens) {
  const uint64_t h = ChainHash(parent_hash, tokens);
  Block& b = blocks_[block];
  if (b.published || published_.count(h)) return h;
  b.published = true;
  b.hash = h;
  b.parent_hash = parent_hash;
  b.tokens.assign(tokens, tokens + block_size_);
  published_[h] = block;
  return h;
}

bool BlockManager::Consistent() const {
  int used = 0, cached = 0, free = 0;
  for (const Block& b : blocks_) {
    if (b.refs > 0)
      used++;
    else if (b.published)
      cached++;
    else
      free++;
  }
  return used == used_ && cached == cached_free() && free == this->free() && reserved_ <= free + cached &&
         used + cached + free == num_blocks();
}

}  // namespace tern
