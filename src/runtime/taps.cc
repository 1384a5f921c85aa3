// Intermediate taps (CompileOptions::intermediates_to_save): resolving the
// patterns to values.
//
// Why the whole file ignores -Wmaybe-uninitialized: GCC 12 reports a false
// positive inside <regex>'s std::function members at -O2 with the
// sanitizers; the warning's location is in the standard headers, so only a
// file-wide setting reaches it.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <regex>

#include "lowering.h"

namespace tessera::runtime {

// The values `patterns` name (a name, or an ECMAScript regex over whole
// names), appended to the graph's outputs: the passes then keep them.
Status add_taps(Graph& g, const std::vector<std::string>& patterns) {
  std::vector<bool> tapped(g.values.size(), false);
  for (const std::string& p : patterns) {
    std::regex re;
    try {
      re = std::regex(p, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return invalid_argument_error("intermediates_to_save: '{}' is not a valid regular expression ({})", p, e.what());
    }
    bool any = false;
    for (size_t v = 0; v < g.values.size(); ++v) {
      const graph::Value& val = g.values[v];
      if (val.constant || (val.name != p && !std::regex_match(val.name, re))) continue;
      any = true;
      tapped[v] = true;
    }
    if (!any) return invalid_argument_error("intermediates_to_save: '{}' matches no value of the graph", p);
  }
  for (size_t v = 0; v < g.values.size(); ++v)
    if (tapped[v] && std::find(g.outputs.begin(), g.outputs.end(), static_cast<int>(v)) == g.outputs.end())
      g.outputs.push_back(static_cast<int>(v));
  return ok_status();
}

}  // namespace tessera::runtime
