// Turning generated tokens into text that is safe to send as it comes:
//
//  * Incremental detokenization (the scheme of Hugging Face TGI): a token is decoded together with a few
//    tokens before it, and only the text beyond what those decode to is new. A character split over several
//    byte tokens decodes to U+FFFD until its last byte arrives; such a tail is held back until then.
//  * Stop strings: text is held back while its end could still grow into a stop string, so a client never
//    receives part of a stop string. When one matches, the text before it is the last text sent.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace tern {

class TextStream {
 public:
  // prompt: the request's tokens (their tail decides how the first generated token decodes).
  TextStream(const Tokenizer* tok, const std::vector<int32_t>& prompt, std::vector<std::string> stop);

  // Adds a generated token and returns the text that became final. *stopped is set when a stop string
  // matched: the text before it is returned and the stream takes nothing more.
  std::string Add(int32_t token, bool* stopped);
  // At the end of generation: the text held back (an unfinished character, a possible stop-string start).
  std::string Flush();

 private:
  std::string Detokenize(bool final);
  std::string Release(std::string text, bool final, bool* stopped);

  const Tokenizer* tok_;
  std::vector<std::string> stop_;
  std::vector<int32_t> ids_;  // a few prompt tokens, then the generated ones
  size_t prefix_offset_ = 0, read_offset_ = 0;
  std::string held_;  // final text not yet sent because a stop string might start in it
  bool stopped_ = false;
};

}  // namespace tern
