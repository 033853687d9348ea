#include "data/prepare_chat.h"

#include <fstream>

#include "data/chat.h"

namespace tern {

Status EncodeChat(const PrepareOptions& o, const std::vector<std::string>& files, const Tokenizer& tok,
                  SplitWriter* train, SplitWriter* val, PrepareSummary::Chat* counts) {
  uint64_t k = 0;
  std::vector<int32_t> ids, mask;
  for (const std::string& file : files) {
    std::ifstream in(file);
    if (!in) return Status::IoError(fmt::format("cannot read {}", file));
    std::string line;
    for (int n = 1; std::getline(in, line); n++) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string at = fmt::format("{}:{}", file, n);
      TERN_ASSIGN_OR_RETURN(const std::vector<ChatMessage> messages, ParseChatLine(line, at));
      const std::vector<ChatSegment> segments = ChatTrainingSegments(messages);
      uint64_t learned = 0;
      ids.clear();
      mask.clear();
      for (const ChatSegment& s : segments) {
        const std::vector<int32_t> t = tok.Encode(s.text);
        ids.insert(ids.end(), t.begin(), t.end());
        mask.insert(mask.end(), t.size(), s.trained ? 1 : 0);
        if (s.trained) learned += t.size();
      }
      ids.push_back(tok.eos_id());
      mask.push_back(segments.back().trained ? 1 : 0);
      learned += mask.back();
      const int split = IsValBlock(k++, o.val_fraction) ? 1 : 0;
      TERN_RETURN_IF_ERROR((split ? val : train)->Append(ids.data(), ids.size(), mask.data()));
      counts->conversations[split]++;
      counts->trained_tokens[split] += learned;
    }
  }
  if (k == 0) return Status::InvalidArgument("the --chat inputs hold no conversation (every line is blank)");
  TERN_RETURN_IF_ERROR(train->Close());
  return val->Close();
}

}  // namespace tern
