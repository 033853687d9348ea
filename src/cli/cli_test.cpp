// The tern binary as a user runs it: bad config keys, bad values and missing files give a non-zero exit
// and a message that names the problem.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace {

struct CmdResult {
  int code;  // exit status; -1 when tern died of a signal (also a test failure)
  std::string output;
};

std::string Tern() {
  const char* b = std::getenv("TERN_BINARY_DIR");
  return std::string(b ? b : TERN_TEST_BINARY_DIR) + "/tern";
}

CmdResult RunTern(const std::string& args) {
  std::string cmd = Tern() + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  // A crash is never the expected "non-zero exit" (the shell may report it as 128 + the signal).
  const int sig = WIFSIGNALED(status)                              ? WTERMSIG(status)
                  : WIFEXITED(status) && WEXITSTATUS(status) > 128 ? WEXITSTATUS(status) - 128
                                                                   : 0;
  if (sig != 0) {
    ADD_FAILURE() << "`tern " << args << "` crashed (signal " << sig << " " << strsignal(sig) << "):\n"
                  << out;
    return {-1, out};
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string WriteConfig(const std::string& name, const std::string& yaml) {
  auto dir = std::filesystem::temp_directory_path() / "tern_cli_test";
  std::filesystem::create_directories(dir);
  auto path = dir / name;
  std::ofstream(path) << yaml;
  return path.string();
}

// Every subcommand main.cpp registers is listed under "Subcommands:" (the root description alone names most
// of them, so the list is parsed) and has a --help of its own (`tern nosuch --help` prints the root's help
// with exit 0, so the usage line is checked).
TEST(Cli, HelpTeachesTheCommands) {
  CmdResult r = RunTern("--help");
  EXPECT_EQ(r.code, 0);
  const size_t list = r.output.find("\nSubcommands:\n");
  ASSERT_NE(list, std::string::npos) << r.output;
  std::set<std::string> listed;
  std::istringstream lines(r.output.substr(list + 14));
  for (std::string line; std::getline(lines, line) && line.starts_with("  ");) {
    std::istringstream words(line);
    std::string name;
    words >> name;
    listed.insert(name);
  }
  for (const char* cmd : {"prepare", "train", "generate", "bench", "export", "plan", "serve", "ckpt", "run",
                          "job", "simulate", "sweep", "eval", "pipeline", "models"}) {
    SCOPED_TRACE(cmd);
    EXPECT_TRUE(listed.count(cmd)) << "not under Subcommands:\n" << r.output;
    CmdResult h = RunTern(std::string(cmd) + " --help");
    EXPECT_EQ(h.code, 0) << h.output;
    EXPECT_NE(h.output.find("Usage: tern " + std::string(cmd) + " "), std::string::npos) << h.output;
  }
  CmdResult unknown = RunTern("nosuch");
  EXPECT_NE(unknown.code, 0) << unknown.output;
}

TEST(Cli, UnknownConfigKeyIsNamedWithTheAllowedOnes) {
  std::string cfg = WriteConfig("bad_key.yaml", "train:\n  lerning_rate: 0.1\n");
  CmdResult r = RunTern("train " + cfg);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("train.lerning_rate"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train.lr"), std::string::npos) << r.output;  // lists what is allowed
}

TEST(Cli, BadValueNamesTheKeyAndTheAllowedValues) {
  std::string cfg = WriteConfig("bad_value.yaml", "train:\n  precision: fp8\n");
  CmdResult r = RunTern("train " + cfg);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("train.precision"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bf16"), std::string::npos) << r.output;
}

TEST(Cli, BadNumberInOverride) {
  std::string cfg = WriteConfig("ok.yaml", "train:\n  steps: 3\n");
  CmdResult r = RunTern("train " + cfg + " --set train.steps=many");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("train.steps"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("many"), std::string::npos) << r.output;
}

TEST(Cli, MissingConfigFile) {
  CmdResult r = RunTern("train /nonexistent/tern.yaml");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("/nonexistent/tern.yaml"), std::string::npos) << r.output;
}

TEST(Cli, MissingDataDirectory) {
  std::string cfg = WriteConfig("no_data.yaml", "data:\n  dir: /nonexistent/prepared\n");
  CmdResult r = RunTern("train " + cfg);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("/nonexistent/prepared"), std::string::npos) << r.output;
}

TEST(Cli, GenerateOnMissingRunDir) {
  CmdResult r = RunTern("generate /nonexistent/run");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("/nonexistent/run"), std::string::npos) << r.output;
}

// `tern bench --model` and `tern plan --model` read the model layer's one preset table, aliases included. The
// bench keeps gpt2-1.5b's 48 layers but shrinks their width, so that it runs in a second.
TEST(Cli, BenchAndPlanTakeThePresetAliases) {
  CmdResult b = RunTern(
      "bench --model gpt2-1.5b --n-embd 64 --n-head 1 --vocab-size 256 --batch 1 --seq 8 "
      "--steps 1 --warmup 0 --json");
  ASSERT_EQ(b.code, 0) << b.output;
  const size_t n_layer = b.output.find("\"n_layer\": 48");
  EXPECT_NE(n_layer, std::string::npos) << b.output;
  CmdResult p = RunTern("plan --model gpt2-1.5b --tokens 1B --top 1");
  EXPECT_EQ(p.code, 0) << p.output;
  CmdResult bad = RunTern("bench --model gpt3");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("gpt2-1558m (gpt2-1.5b)"), std::string::npos) << bad.output;
  CmdResult bad_plan = RunTern("plan --model gpt3 --tokens 1B");
  EXPECT_NE(bad_plan.code, 0);
  EXPECT_NE(bad_plan.output.find("gpt2-1558m (gpt2-1.5b)"), std::string::npos) << bad_plan.output;
}

TEST(Cli, ListKeysShowsDefaults) {
  CmdResult r = RunTern("train --list-keys");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.output.find("train.precision"), std::string::npos);
  EXPECT_NE(r.output.find("fp32 | bf16"), std::string::npos);
}

// `tern simulate` on one shipped trace: every policy under both readings, as JSON; a missing deadline and a
// bad polarity are errors that name the flag.
TEST(Cli, SimulateReplaysAShippedTrace) {
  const char* src = std::getenv("TERN_SOURCE_DIR");
  const std::string trace = std::string(src ? src : TERN_TEST_SOURCE_DIR) +
                            "/data/spot-traces/availability/1-node/aws-02-15-2023/"
                            "us-west-2a_v100_1.json";
  CmdResult r = RunTern("simulate --trace " + trace + " --work-hours 6h --deadline 12h --starts 20 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* s : {"\"policy\": \"uniform-progress\"", "\"policy\": \"omniscient\"",
                        "\"polarity\": \"available-if-nonzero\"", "\"polarity\": \"unavailable-if-nonzero\"",
                        "\"prices\": \"aws/us-west-2/p3.2xlarge\"", "\"zone\": \"us-west-2a\""})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  CmdResult no_deadline = RunTern("simulate --trace " + trace + " --work-hours 6h");
  EXPECT_EQ(no_deadline.code, 1);
  EXPECT_NE(no_deadline.output.find("--deadline"), std::string::npos) << no_deadline.output;
  CmdResult bad = RunTern("simulate --trace " + trace + " --work-hours 6h --deadline 8h --polarity nonzero");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.output.find("available-if-nonzero"), std::string::npos) << bad.output;
  CmdResult hazard =
      RunTern("simulate --trace " + trace + " --estimate-hazard --polarity available-if-nonzero");
  EXPECT_EQ(hazard.code, 0) << hazard.output;
  EXPECT_NE(hazard.output.find("MTBF"), std::string::npos) << hazard.output;
}

}  // namespace

// `tern prepare --verify DIR`: a fresh dataset verifies (exit 0, the counts and content printed); a byte
// changed in a shard is exit 1 naming the shard; prepare without --input says what it needs (exit 2).
namespace {
TEST(Cli, PrepareVerifyChecksEveryShard) {
  const auto dir = std::filesystem::temp_directory_path() / ("tern_cli_verify_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    std::ofstream corpus(dir / "corpus.txt");
    for (int i = 0; i < 3000; i++)
      corpus << "line " << i << " of a small corpus, word " << (i * 7919) % 1000 << "\n";
  }
  const std::string out = (dir / "data").string();
  CmdResult p = RunTern("prepare --input " + (dir / "corpus.txt").string() + " --out " + out +
                        " --vocab-size 300 --threads 1 --shard-tokens 4096");
  ASSERT_EQ(p.code, 0) << p.output;
  CmdResult v = RunTern("prepare --verify " + out);
  EXPECT_EQ(v.code, 0) << v.output;
  EXPECT_NE(v.output.find("verified " + out), std::string::npos) << v.output;
  EXPECT_NE(v.output.find("content "), std::string::npos) << v.output;
  const std::string shard = out + "/train_000.bin";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(70);
    char c = 0;
    f.read(&c, 1);
    c ^= 1;
    f.seekp(70);
    f.write(&c, 1);
  }
  v = RunTern("prepare --verify " + out);
  EXPECT_EQ(v.code, 1) << v.output;
  EXPECT_NE(v.output.find(shard), std::string::npos) << v.output;
  CmdResult none = RunTern("prepare --out " + out);
  EXPECT_EQ(none.code, 2) << none.output;
  EXPECT_NE(none.output.find("--input"), std::string::npos) << none.output;
  std::filesystem::remove_all(dir);
}
}  // namespace
