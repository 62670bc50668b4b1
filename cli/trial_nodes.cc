#include "trial_nodes.h"

#include <fstream>
#include <sstream>

#include "cli_error.h"

namespace dstrain_cli {

TrialNodes ReadHostfile(const std::string &path) {
  std::ifstream in(path);
  if (!in) throw CliError(kExitUsage, "hostfile " + path + ": cannot be read");
  TrialNodes nodes;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string host, slots_word, extra;
    if (!(words >> host)) continue;
    const std::string where = "hostfile " + path + " line " + std::to_string(number);
    int64_t slots = 1;
    if (words >> slots_word) {
      size_t used = 0;
      try {
        if (slots_word.rfind("slots=", 0) != 0) throw std::invalid_argument("");
        slots = std::stoll(slots_word.substr(6), &used);
      } catch (const std::exception &) {
        used = 0;
      }
      if (used == 0 || used != slots_word.size() - 6 || slots < 1)
        throw CliError(kExitUsage,
                       where + ": expected \"HOST slots=N\" (N >= 1), found \"" + line + "\"");
    }
    if (words >> extra)
      throw CliError(kExitUsage, where + ": unexpected \"" + extra + "\" after the slots");
    for (const std::string &h : nodes.hosts)
      if (h == host) throw CliError(kExitUsage, where + ": host " + host + " is listed twice");
    if (!nodes.hosts.empty() && slots != nodes.slots)
      throw CliError(kExitUsage, where + ": " + host + " has " + std::to_string(slots) +
                                     " slots, the hosts before it " + std::to_string(nodes.slots) +
                                     "; every host runs the same number of ranks");
    nodes.slots = slots;
    nodes.hosts.push_back(host);
  }
  if (nodes.hosts.empty()) throw CliError(kExitUsage, "hostfile " + path + ": lists no host");
  nodes.master_addr = nodes.hosts.front();
  return nodes;
}

std::string ShellQuoted(const std::vector<std::string> &argv) {
  std::string line;
  for (const std::string &a : argv) {
    if (!line.empty()) line += ' ';
    if (!a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_-+=.,/:@%") == std::string::npos) {
      line += a;
      continue;
    }
    line += '\'';
    for (char c : a) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

std::vector<NodeCommand> TrialCommands(const TrialNodes &nodes, const std::string &self,
                                       int64_t master_port, const std::string &token,
                                       const std::vector<std::string> &program) {
  std::vector<NodeCommand> commands;
  const size_t count = nodes.hosts.size();
  for (size_t node = 0; node < count; ++node) {
    std::vector<std::string> launch = {self, "launch", "--nproc-per-node",
                                       std::to_string(nodes.slots)};
    if (count > 1)
      launch.insert(launch.end(), {"--nnodes", std::to_string(count), "--node-rank",
                                   std::to_string(node), "--master-addr", nodes.master_addr});
    launch.insert(launch.end(), {"--master-port", std::to_string(master_port), "--"});
    launch.insert(launch.end(), program.begin(), program.end());
    if (node == 0) {
      commands.push_back({launch, nodes.hosts[node]});
      continue;
    }
    // The remote shell joins its arguments into one command line: pass one.
    std::vector<std::string> argv;
    std::istringstream words(nodes.remote);
    for (std::string w; words >> w;) {
      for (size_t at; (at = w.find("{host}")) != std::string::npos;)
        w.replace(at, 6, nodes.hosts[node]);
      argv.push_back(w);
    }
    std::vector<std::string> remote = {"env", "DSTRAIN_JOB_TOKEN=" + token};
    remote.insert(remote.end(), launch.begin(), launch.end());
    argv.push_back(ShellQuoted(remote));
    commands.push_back({argv, nodes.hosts[node]});
  }
  return commands;
}

std::string CommandLines(const TrialNodes &nodes, const std::string &self, int64_t master_port,
                         const std::vector<std::string> &program) {
  // The marker is plain shell-safe text, so it lands inside the single
  // quotes of the remote command word; it becomes a break out of them into
  // a double-quoted expansion on the reader's side.
  const std::string marker = "@DSTRAIN_JOB_TOKEN@";
  std::string text;
  if (nodes.hosts.size() > 1)
    text =
        "# export DSTRAIN_JOB_TOKEN=$(openssl rand -hex 16) first: every node's launcher "
        "takes it from this shell\n";
  for (const NodeCommand &c : TrialCommands(nodes, self, master_port, marker, program)) {
    std::string line = ShellQuoted(c.argv);
    for (size_t at; (at = line.find(marker)) != std::string::npos;)
      line.replace(at, marker.size(), "'\"$DSTRAIN_JOB_TOKEN\"'");
    text += line + "\n";
  }
  return text;
}

}  // namespace dstrain_cli
