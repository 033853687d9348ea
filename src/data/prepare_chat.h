// Inside `tern prepare --chat` (data/prepare.cpp): JSON Lines of conversations into token shards with loss
// masks. Not for use outside src/data.
#pragma once

#include <string>
#include <vector>

#include "data/prepare.h"
#include "data/split_writer.h"
#include "data/tokenizer.h"

namespace tern {

// Each non-blank line of each file is {"messages": [...]} (data/chat.h ParseChatMessages) with at least one
// assistant reply; it is rendered by ChatTrainingSegments and followed by end-of-text (learned when the
// conversation ends with a reply, so the model learns to stop). Conversation k (counted over all files)
// goes to val when IsValBlock(k, val_fraction). A bad line fails with FILE:LINE and what to fix.
Status EncodeChat(const PrepareOptions& o, const std::vector<std::string>& files, const Tokenizer& tok,
                  SplitWriter* train, SplitWriter* val, PrepareSummary::Chat* counts);

}  // namespace tern
