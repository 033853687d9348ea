// tern models register|ls|show|alias|history|diff: the model registry (src/registry, docs/registry.md).
#include <cstdio>
#include <map>
#include <set>

#include "cli/command.h"
#include "registry/registry.h"

namespace tern::cli {
namespace {

struct ModelsOptions {
  std::string registry, key_file;
  bool json = false;
  // register
  std::string source, name, alias, note, parent;
  // show / alias / history / diff
  std::string ref, ref_b, at;
};

int Fail(const std::string& verb, const Status& st) {
  std::fprintf(stderr, "tern models %s: %s\n", verb.c_str(), st.message().c_str());
  return 1;
}

Result<std::unique_ptr<registry::Registry>> OpenRegistry(const ModelsOptions& o) {
  return registry::OpenRegistry(o.registry, o.key_file);
}

std::string Num(const nlohmann::json& j, const char* key, const char* fmt_spec) {
  if (!j.contains(key) || !j[key].is_number()) return "-";
  return fmt::format(fmt::runtime(fmt_spec), j[key].get<double>());
}

// Every alias of `name` pointing at `version`, comma-separated.
std::string AliasesOf(const std::vector<registry::AliasMove>& aliases, const std::string& name, int version) {
  std::string out;
  for (const auto& a : aliases)
    if (a.name == name && a.version == version) out += (out.empty() ? "" : ",") + a.alias;
  return out;
}

nlohmann::json AliasJson(const registry::AliasMove& a) {
  return {{"alias", a.alias}, {"version", a.version}, {"moved_utc", a.moved_utc}};
}

int RunRegister(const ModelsOptions& o) {
  auto src = registry::ReadModelSource(o.source);
  if (!src.ok())
    return Fail("register", src.status().WithContext(
                                "reading " + o.source +
                                " (give a run directory with model.safetensors, or a checkpoint step_...)"));
  auto reg = OpenRegistry(o);
  if (!reg.ok()) return Fail("register", reg.status());
  auto e = (*reg)->Register(*src, {o.name, o.alias, o.note, o.parent});
  if (!e.ok()) return Fail("register", e.status());
  if (o.json) {
    std::printf("%s\n",
                nlohmann::json({{"name", e->name}, {"version", e->version}, {"manifest", e->manifest}})
                    .dump(2)
                    .c_str());
    return 0;
  }
  const auto& w = e->manifest["files"]["model.safetensors"];
  std::printf("registered %s version %d (weights sha256 %s, %.1f MB)%s\n", e->name.c_str(), e->version,
              w["sha256"].get<std::string>().substr(0, 12).c_str(), w["bytes"].get<double>() / 1e6,
              e->signed_entry ? ", signed" : "");
  if (!o.alias.empty()) std::printf("alias %s -> %s@%d\n", o.alias.c_str(), e->name.c_str(), e->version);
  std::printf("use it as models:/%s@%d\n", e->name.c_str(), e->version);
  return 0;
}

int RunList(const ModelsOptions& o) {
  auto reg = OpenRegistry(o);
  if (!reg.ok()) return Fail("ls", reg.status());
  auto entries = (*reg)->List(o.ref);
  if (!entries.ok()) return Fail("ls", entries.status());
  auto aliases = (*reg)->Aliases(o.ref);
  if (!aliases.ok()) return Fail("ls", aliases.status());
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : *entries) {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& al : *aliases)
        if (al.name == e.name && al.version == e.version) a.push_back(al.alias);
      out.push_back({{"name", e.name},
                     {"version", e.version},
                     {"created_utc", e.manifest.value("created_utc", "")},
                     {"metrics", e.manifest.value("metrics", nlohmann::json::object())},
                     {"parent", e.manifest.value("parent", nlohmann::json())},
                     {"signed", e.signed_entry},
                     {"aliases", a}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  if (entries->empty()) {
    std::printf("no models registered%s (tern models register RUN_DIR --name NAME)\n",
                o.ref.empty() ? "" : (" under " + o.ref).c_str());
    return 0;
  }
  // A column for the eval.choices accuracy when any version was trained with one.
  bool choices = false;
  for (const auto& e : *entries)
    choices = choices || e.manifest.value("metrics", nlohmann::json::object()).contains("choice_acc");
  const std::string acc_head = choices ? fmt::format(" {:>10}", "CHOICE ACC") : "";
  std::printf("%-20s %4s  %-24s %9s%s %12s %9s  %s\n", "NAME", "VER", "CREATED (UTC)", "VAL LOSS",
              acc_head.c_str(), "TOKENS", "$", "ALIASES");
  for (const auto& e : *entries) {
    const nlohmann::json m = e.manifest.value("metrics", nlohmann::json::object());
    const std::string acc = choices ? fmt::format(" {:>10}", Num(m, "choice_acc", "{:.4f}")) : "";
    std::printf("%-20s %4d  %-24s %9s%s %12s %9s  %s\n", e.name.c_str(), e.version,
                e.manifest.value("created_utc", "").c_str(), Num(m, "val_loss", "{:.4f}").c_str(),
                acc.c_str(), Num(m, "tokens", "{:.0f}").c_str(), Num(m, "cost_usd", "{:.4f}").c_str(),
                AliasesOf(*aliases, e.name, e.version).c_str());
  }
  return 0;
}

int RunShow(const ModelsOptions& o) {
  auto ref = registry::ParseModelRef(o.ref);
  if (!ref.ok()) return Fail("show", ref.status());
  auto reg = OpenRegistry(o);
  if (!reg.ok()) return Fail("show", reg.status());
  auto e = (*reg)->Get(*ref);
  if (!e.ok()) return Fail("show", e.status());
  auto aliases = (*reg)->Aliases(e->name);
  if (!aliases.ok()) return Fail("show", aliases.status());
  nlohmann::json out = e->manifest;
  out["aliases"] = nlohmann::json::array();
  for (const auto& a : *aliases)
    if (a.version == e->version) out["aliases"].push_back(a.alias);
  out["verified"] = e->signed_entry ? "manifest hash and signature" : "manifest hash";
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

int RunAlias(const ModelsOptions& o) {
  auto ref = registry::ParseModelRef(o.ref);
  if (!ref.ok()) return Fail("alias", ref.status());
  if (!ref->version)
    return Fail("alias", Status::InvalidArgument("give the version to point at: NAME@VERSION, e.g. " +
                                                 ref->name + "@3"));
  auto reg = OpenRegistry(o);
  if (!reg.ok()) return Fail("alias", reg.status());
  Status st = (*reg)->SetAlias(ref->name, *ref->version, o.alias);
  if (!st.ok()) return Fail("alias", st);
  if (o.json)
    std::printf("%s\n", nlohmann::json({{"name", ref->name}, {"alias", o.alias}, {"version", *ref->version}})
                            .dump(2)
                            .c_str());
  else
    std::printf("alias %s -> %s@%d\n", o.alias.c_str(), ref->name.c_str(), *ref->version);
  return 0;
}

int RunHistory(const ModelsOptions& o) {
  auto reg = OpenRegistry(o);
  if (!reg.ok()) return Fail("history", reg.status());
  if (!o.at.empty()) {
    auto at = registry::ParseUtc(o.at);
    if (!at.ok()) return Fail("history", at.status());
    auto aliases = (*reg)->AliasesAt(o.ref, *at);
    if (!aliases.ok()) return Fail("history", aliases.status());
    if (o.json) {
      nlohmann::json out = {
          {"name", o.ref}, {"at_utc", registry::FormatUtc(*at)}, {"aliases", nlohmann::json::array()}};
      for (const auto& a : *aliases) out["aliases"].push_back(AliasJson(a));
      std::printf("%s\n", out.dump(2).c_str());
      return 0;
    }
    std::printf("aliases of %s at %s:\n", o.ref.c_str(), registry::FormatUtc(*at).c_str());
    if (aliases->empty()) std::printf("  (none yet)\n");
    for (const auto& a : *aliases)
      std::printf("  %-16s -> %s@%d (since %s)\n", a.alias.c_str(), o.ref.c_str(), a.version,
                  a.moved_utc.c_str());
    return 0;
  }
  auto moves = (*reg)->History(o.ref);
  if (!moves.ok()) return Fail("history", moves.status());
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& a : *moves) out.push_back(AliasJson(a));
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  if (moves->empty()) std::printf("no alias of %s was ever set\n", o.ref.c_str());
  for (const auto& a : *moves)
    std::printf("%s  %-16s -> %s@%d\n", a.moved_utc.c_str(), a.alias.c_str(), o.ref.c_str(), a.version);
  return 0;
}

// The fields a diff compares, flattened: config.*, model.*, metrics.*, the file hashes, data, parent.
std::map<std::string, nlohmann::json> DiffFields(const nlohmann::json& m) {
  std::map<std::string, nlohmann::json> out;
  for (const char* group : {"config", "model", "metrics"})
    if (m.contains(group) && m[group].is_object())
      for (const auto& [k, v] : m[group].items()) out[std::string(group) + "." + k] = v;
  if (m.contains("files"))
    for (const auto& [k, v] : m["files"].items()) out["files." + k + ".sha256"] = v.value("sha256", "");
  if (m.contains("data") && m["data"].is_object())
    out["data.prepare_sha256"] = m["data"].value("prepare_sha256", "");
  if (m.contains("data") && m["data"].is_object() && m["data"].contains("content"))
    out["data.content"] = m["data"]["content"];
  out["parent"] = m.value("parent", nlohmann::json());
  out["source.run_dir"] = m["source"].value("run_dir", "");
  return out;
}

int RunDiff(const ModelsOptions& o) {
  auto ra = registry::ParseModelRef(o.ref), rb = registry::ParseModelRef(o.ref_b);
  if (!ra.ok()) return Fail("diff", ra.status());
  if (!rb.ok()) return Fail("diff", rb.status());
  auto reg = OpenRegistry(o);
  if (!reg.ok()) return Fail("diff", reg.status());
  auto a = (*reg)->Get(*ra), b = (*reg)->Get(*rb);
  if (!a.ok()) return Fail("diff", a.status());
  if (!b.ok()) return Fail("diff", b.status());
  auto fa = DiffFields(a->manifest), fb = DiffFields(b->manifest);
  std::set<std::string> keys;
  for (auto& [k, v] : fa) keys.insert(k);
  for (auto& [k, v] : fb) keys.insert(k);
  const std::string na = fmt::format("{}@{}", a->name, a->version),
                    nb = fmt::format("{}@{}", b->name, b->version);
  nlohmann::json diffs = nlohmann::json::array();
  for (const auto& k : keys) {
    nlohmann::json va = fa.count(k) ? fa[k] : nlohmann::json(), vb = fb.count(k) ? fb[k] : nlohmann::json();
    if (va != vb) diffs.push_back({{"key", k}, {"a", va}, {"b", vb}});
  }
  if (o.json) {
    std::printf("%s\n", nlohmann::json({{"a", na}, {"b", nb}, {"differences", diffs}}).dump(2).c_str());
    return 0;
  }
  if (diffs.empty())
    std::printf("%s and %s do not differ in config, model, metrics or files\n", na.c_str(), nb.c_str());
  else
    std::printf("%-36s %-24s %-24s\n", "KEY", na.c_str(), nb.c_str());
  for (const auto& d : diffs)
    std::printf("%-36s %-24s %-24s\n", d["key"].get<std::string>().c_str(), d["a"].dump().c_str(),
                d["b"].dump().c_str());
  return 0;
}

}  // namespace

void AddModelsCommand(CLI::App& root, CommandTable& table) {
  auto o = std::make_shared<ModelsOptions>();
  auto* sub = root.add_subcommand("models", "The model registry: versions, aliases with history, signing");
  sub->require_subcommand(1);
  sub->footer(
      "The registry is --registry DIR|s3://bucket/prefix, else $TERN_REGISTRY, else $TERN_HOME/registry\n"
      "(default ~/.tern/registry). tern serve/generate/export take models:/NAME[@VERSION|@ALIAS] "
      "(docs/registry.md).\n"
      "Examples:\n  tern models register runs/demo --name demo --alias production\n"
      "  tern models history demo --at 2026-12-01T12:00:00Z\n  tern serve models:/demo@production");
  auto common = [&](CLI::App* c) {
    c->add_option("--registry", o->registry, "registry directory or s3://bucket/prefix");
    c->add_option("--key-file", o->key_file, "HMAC-SHA256 key: sign on register, verify on read");
    c->add_flag("--json", o->json, "machine-readable output");
  };
  auto* reg =
      sub->add_subcommand("register", "register a run directory or checkpoint as NAME's next version");
  reg->add_option("source", o->source, "run directory (model.safetensors) or checkpoint (step_...)")
      ->required();
  reg->add_option("--name", o->name, "model name")->required();
  reg->add_option("--alias", o->alias, "point this alias at the new version");
  reg->add_option("--note", o->note, "free text kept in the manifest");
  reg->add_option("--parent", o->parent, "the version this one was fine-tuned from: NAME@V");
  common(reg);
  table.Add(reg, [o] { return RunRegister(*o); });
  auto* ls = sub->add_subcommand("ls", "every version (of NAME), with metrics and aliases");
  ls->add_option("name", o->ref, "only this model");
  common(ls);
  table.Add(ls, [o] { return RunList(*o); });
  auto* show = sub->add_subcommand("show", "one version's verified manifest");
  show->add_option("ref", o->ref, "NAME, NAME@VERSION or NAME@ALIAS")->required();
  common(show);
  table.Add(show, [o] { return RunShow(*o); });
  auto* alias = sub->add_subcommand("alias", "point ALIAS at NAME@VERSION (the move is recorded)");
  alias->add_option("ref", o->ref, "NAME@VERSION")->required();
  alias->add_option("alias", o->alias, "alias, e.g. production")->required();
  common(alias);
  table.Add(alias, [o] { return RunAlias(*o); });
  auto* hist = sub->add_subcommand("history", "every alias move of NAME, or the aliases at --at TIME");
  hist->add_option("name", o->ref, "model name")->required();
  hist->add_option("--at", o->at, "UTC time: 2026-12-02T00:40:00Z");
  common(hist);
  table.Add(hist, [o] { return RunHistory(*o); });
  auto* diff = sub->add_subcommand("diff", "config keys, metrics and files that differ between A and B");
  diff->add_option("a", o->ref, "NAME@VERSION|@ALIAS")->required();
  diff->add_option("b", o->ref_b, "NAME@VERSION|@ALIAS")->required();
  common(diff);
  table.Add(diff, [o] { return RunDiff(*o); });
}

}  // namespace tern::cli
