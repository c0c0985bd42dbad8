#include "ddp/launch/recorded_error.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ddp/common/text.h"

namespace ddp {

std::optional<std::string> recorded_error(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const auto json = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  // {"message": {"message": "RuntimeError: boom", "extraInfo": {...}}}, or a plain string message
  // (torch's own format for a non-Python failure).
  if (!json.is_object() || !json.contains("message")) return std::nullopt;
  const auto& outer = json["message"];
  const auto& message = outer.is_object() && outer.contains("message") ? outer["message"] : outer;
  if (!message.is_string() || message.get<std::string>().empty()) return std::nullopt;
  const std::string whole = message.get<std::string>();
  return printable(whole.substr(0, whole.find('\n')), 500);
}

}  // namespace ddp
