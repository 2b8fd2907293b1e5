#include "ulnic/util/json.h"

#include <cstdlib>

namespace ulnic {

namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(std::string_view t) : t_(t) {}

  Result<Json> document() {
    Json v;
    if (!value(v, 0)) return fail("bad JSON at offset " + std::to_string(i_));
    skip_ws();
    if (i_ != t_.size()) return fail("trailing bytes after JSON at offset " + std::to_string(i_));
    return v;
  }

 private:
  void skip_ws() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    skip_ws();
    if (i_ < t_.size() && t_[i_] == c) return ++i_, true;
    return false;
  }
  bool literal(std::string_view w) {
    if (t_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }

  static void put_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xc0 | cp >> 6), out += char(0x80 | (cp & 0x3f));
    } else {
      out += char(0xe0 | cp >> 12), out += char(0x80 | ((cp >> 6) & 0x3f)), out += char(0x80 | (cp & 0x3f));
    }
  }

  bool str(std::string& out) {
    if (!eat('"')) return false;
    while (i_ < t_.size()) {
      char c = t_[i_++];
      if (c == '"') return true;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= t_.size()) return false;
      char e = t_[i_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (i_ + 4 > t_.size()) return false;
          unsigned cp = unsigned(std::strtoul(std::string(t_.substr(i_, 4)).c_str(), nullptr, 16));
          i_ += 4;
          put_utf8(out, cp);
          break;
        }
        default: return false;
      }
    }
    return false;
  }

  bool value(Json& v, int depth) {
    if (depth > kMaxDepth) return false;
    skip_ws();
    if (i_ >= t_.size()) return false;
    char c = t_[i_];
    if (c == '{') {
      ++i_;
      v.type = Json::Type::kObject;
      if (eat('}')) return true;
      do {
        std::string key;
        Json member;
        skip_ws();
        if (!str(key) || !eat(':') || !value(member, depth + 1)) return false;
        v.object.emplace_back(std::move(key), std::move(member));
      } while (eat(','));
      return eat('}');
    }
    if (c == '[') {
      ++i_;
      v.type = Json::Type::kArray;
      if (eat(']')) return true;
      do {
        Json item;
        if (!value(item, depth + 1)) return false;
        v.array.push_back(std::move(item));
      } while (eat(','));
      return eat(']');
    }
    if (c == '"') {
      v.type = Json::Type::kString;
      return str(v.string);
    }
    if (literal("true")) return v.type = Json::Type::kBool, v.boolean = true, true;
    if (literal("false")) return v.type = Json::Type::kBool, true;
    if (literal("null")) return v.type = Json::Type::kNull, true;
    const char* start = t_.data() + i_;
    char* end = nullptr;
    std::string num(start, std::min<size_t>(t_.size() - i_, 64));
    v.number = std::strtod(num.c_str(), &end);
    if (end == num.c_str()) return false;
    v.type = Json::Type::kNumber;
    i_ += size_t(end - num.c_str());
    return true;
  }

  std::string_view t_;
  size_t i_ = 0;
};

}  // namespace

Json::Json() noexcept = default;

const Json* Json::get(std::string_view key) const {
  for (const auto& [k, v] : object)
    if (k == key) return &v;
  return nullptr;
}

const Json* Json::find_string(std::string_view key) const {
  for (const auto& [k, v] : object) {
    if (k == key && v.type == Type::kString) return &v;
    if (const Json* inner = v.find_string(key)) return inner;
  }
  for (const auto& item : array)
    if (const Json* inner = item.find_string(key)) return inner;
  return nullptr;
}

Result<Json> parse_json(std::string_view text) { return Parser(text).document(); }

std::string json_escape(std::string_view s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (static_cast<unsigned char>(c) < 0x20) o += ' ';
    else o += c;
  }
  return o;
}

}  // namespace ulnic
