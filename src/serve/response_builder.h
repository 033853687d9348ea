// Turns the engine's events for one request into its response: the whole JSON body, or the server-sent
// event chunks as they come. It owns what the events leave to the API: the echoed prompt and its logprobs,
// the space after the chat template's "Assistant:", text offsets, usage summed over the n choices (the
// prompt counted once), and best_of: the n candidates with the highest mean token logprob, best first (usage
// counts every candidate). No HTTP here: server.cpp writes what it returns.
#pragma once

#include <string>
#include <vector>

#include "infer/engine.h"
#include "serve/api.h"

namespace tern {

class ResponseBuilder {
 public:
  ResponseBuilder(const ParsedRequest& request, ResponseMeta meta);

  // Non-streaming: feed every event, then Body() once finished().
  void Add(const GenerationEvent& ev);
  std::string Body() const;

  // Streaming: the JSON payloads of the chunks (without "data: "), in order. StreamStart() opens the stream
  // (chat: one role chunk per choice); Stream() turns one event into its chunks and, after the last choice
  // finishes, the usage chunk when the request asked for it. A cancelled event yields nothing: the caller
  // reports the error.
  std::vector<std::string> StreamStart() const;
  std::vector<std::string> Stream(const GenerationEvent& ev);

  bool finished() const { return finished_ == static_cast<int>(choices_.size()); }
  bool cancelled() const { return cancelled_; }
  const ResponseMeta& meta() const { return meta_; }
  const Usage& usage() const { return usage_; }  // so far (every candidate's tokens)

 private:
  struct Choice {
    ChoiceOut all;               // everything so far (non-streaming)
    bool started = false;        // its first event was seen
    bool space_pending = false;  // chat: the reply's first character may be the template's space
    int offset = 0;              // characters of text before its next token
    double logprob_sum = 0;      // of its generated tokens (best_of ranks by the mean)
    int logprob_count = 0;
  };
  // The echo of choice `ev.index` (on its first event; empty text when there is no echo) and the event's own
  // text and logprobs.
  void Split(const GenerationEvent& ev, ChoiceOut* echo, ChoiceOut* delta);
  void CountFinish(const GenerationEvent& ev);

  ResponseMeta meta_;
  bool stream_usage_ = false, echo_ = false, logprobs_ = false;
  int n_ = 1;  // choices returned: fewer than choices_ (the candidates) with best_of
  std::string echo_text_;
  std::vector<int32_t> prompt_;
  std::vector<Choice> choices_;
  int finished_ = 0;
  bool cancelled_ = false;
  Usage usage_;
};

}  // namespace tern
