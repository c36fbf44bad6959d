#include "data/document.h"

#include <algorithm>
#include <functional>
#include <stdexcept>

#include "html_lexer.h"
#include "markup_projection.h"
#include "torchmt/util/strings.h"
#include "util/utf8.h"

namespace torchmt {
namespace {

bool blank(std::string_view s) { return std::all_of(s.begin(), s.end(), is_ascii_space); }

}  // namespace

DocumentFormat parse_document_format(const std::string& name) {
  if (name == "text") return DocumentFormat::kText;
  if (name == "html") return DocumentFormat::kHtml;
  throw std::invalid_argument("format '" + name + "' is not supported (text or html)");
}

Document::Document(std::string_view text, DocumentFormat format, const SentenceSplitter* splitter) {
  if (format == DocumentFormat::kHtml) {
    parse_html(text, splitter);
    return;
  }
  for (size_t begin = 0; begin <= text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(begin, end - begin);
    if (blank(line)) {
      parts_.push_back({std::string(line)});
    } else {
      TextBlock block;
      block.text = std::string(line);
      add_block(std::move(block), splitter);
    }
    if (end < text.size()) parts_.push_back({"\n"});
    begin = end + 1;
  }
}

Document::~Document() = default;
Document::Document(const Document&) = default;
Document::Document(Document&&) noexcept = default;
Document& Document::operator=(const Document&) = default;
Document& Document::operator=(Document&&) noexcept = default;

void Document::add_block(TextBlock block, const SentenceSplitter* splitter) {
  if (splitter) {
    block.spans = splitter->split(block.text);
  } else {
    const auto words = whitespace_words(block.text);
    block.spans.push_back({words.front().begin, words.back().end});
  }
  block.first_sentence = sentences_.size();
  for (const auto& span : block.spans) {
    std::string sentence = block.text.substr(span.begin, span.end - span.begin);
    if (block.html) {  // HTML whitespace (newlines, indentation) is one space
      std::string collapsed;
      for (const auto& w : whitespace_words(sentence)) {
        if (!collapsed.empty()) collapsed += ' ';
        collapsed.append(sentence, w.begin, w.end - w.begin);
      }
      sentence = std::move(collapsed);
    }
    sentences_.push_back(std::move(sentence));
  }
  for (const auto& m : block.markup) needs_alignments_ = needs_alignments_ || m.paired || m.begin > 0;
  parts_.push_back({std::string(), static_cast<int64_t>(blocks_.size())});
  blocks_.push_back(std::move(block));
}

// Text goes into the current block, inline tags become its markup; block-level tags, declarations
// and untranslated elements end it and are copied as written.
void Document::parse_html(std::string_view text, const SentenceSplitter* splitter) {
  TextBlock block;
  block.html = true;
  size_t raw_begin = 0;          // where the current block starts in `text`
  std::vector<int32_t> open;     // its open inline elements, innermost last
  std::vector<std::string> open_names;
  auto add_markup = [&](std::string_view raw, bool paired) {
    InlineMarkup m;
    m.open = std::string(raw);
    m.begin = m.end = block.text.size();
    m.parent = open.empty() ? -1 : open.back();
    m.paired = paired;
    block.markup.push_back(std::move(m));
  };
  // An element left open becomes a zero-width item where it began.
  auto unpair = [&](int32_t e) {
    auto& m = block.markup[static_cast<size_t>(e)];
    m.paired = false;
    m.end = m.begin;
  };
  // Ends the block before text[pos]: translated when it has words, else copied as written.
  auto flush = [&](size_t pos) {
    for (int32_t e : open) unpair(e);
    open.clear();
    open_names.clear();
    if (blank(block.text)) {
      if (pos > raw_begin) parts_.push_back({std::string(text.substr(raw_begin, pos - raw_begin))});
    } else {
      add_block(std::move(block), splitter);
    }
    block = TextBlock();
    block.html = true;
  };
  auto literal = [&](size_t begin, size_t end) {
    flush(begin);
    parts_.push_back({std::string(text.substr(begin, end - begin))});
    raw_begin = end;
  };
  auto close_element = [&](const std::string& name, std::string_view raw) {
    const auto match = std::find(open_names.rbegin(), open_names.rend(), name);
    if (match == open_names.rend()) return add_markup(raw, false);  // a stray end tag stays where it was
    for (auto left = match - open_names.rbegin(); left > 0; --left) {  // left open inside it
      unpair(open.back());
      open.pop_back();
      open_names.pop_back();
    }
    auto& m = block.markup[static_cast<size_t>(open.back())];
    m.close = std::string(raw);
    m.end = block.text.size();
    open.pop_back();
    open_names.pop_back();
  };
  html::Lexer lexer(text);
  html::Token token;
  while (lexer.next(token)) {
    const std::string_view raw = text.substr(token.begin, token.end - token.begin);
    switch (token.kind) {
      case html::Token::Kind::kText:
        block.text += raw;
        break;
      case html::Token::Kind::kComment:
        add_markup(raw, false);
        break;
      case html::Token::Kind::kDeclaration:
        literal(token.begin, token.end);
        break;
      case html::Token::Kind::kEntity:
        if (token.code_point == 0xFFFD) {
          block.text += encode_utf8(std::u32string(1, token.code_point));  // not a character: not spelled back
        } else if (token.code_point == 0xA0) {
          block.text += ' ';  // a word separator to the model (its normalisation makes it a space)
        } else {
          const std::string decoded = encode_utf8(std::u32string(1, token.code_point));
          spelled_.emplace(decoded, std::string(raw));
          block.text += decoded;
        }
        break;
      case html::Token::Kind::kTag: {
        const html::Tag& tag = token.tag;
        const auto kind = html::classify(tag.name);
        if (!tag.end && (kind == html::ElementKind::kRawText || kind == html::ElementKind::kUntranslated ||
                         tag.untranslated)) {
          literal(token.begin, lexer.skip_element(tag));
        } else if (kind == html::ElementKind::kInline && tag.end) {
          close_element(tag.name, raw);
        } else if (kind == html::ElementKind::kInline && !tag.self_closing) {
          add_markup(raw, true);
          open.push_back(static_cast<int32_t>(block.markup.size() - 1));
          open_names.push_back(tag.name);
        } else if (kind == html::ElementKind::kInline || kind == html::ElementKind::kVoidInline) {
          add_markup(raw, false);
        } else {
          literal(token.begin, token.end);  // block-level (and unknown) tags end the block
        }
        break;
      }
    }
  }
  flush(text.size());
}

std::string Document::escape(std::string_view text) const {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    size_t n = 1;
    const auto b = static_cast<unsigned char>(text[i]);
    if (b >= 0xC0) n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
    n = std::min(n, text.size() - i);
    const std::string ch(text.substr(i, n));
    if (const auto it = spelled_.find(ch); it != spelled_.end()) {
      out += it->second;
    } else if (ch == "&") {
      out += "&amp;";
    } else if (ch == "<") {
      out += "&lt;";
    } else if (ch == ">") {
      out += "&gt;";
    } else {
      out += ch;
    }
    i += n;
  }
  return out;
}

std::string Document::assemble(const std::vector<SentenceTranslation>& translations) const {
  if (translations.size() != sentences_.size())
    throw std::invalid_argument("document: " + std::to_string(translations.size()) + " translations for " +
                                std::to_string(sentences_.size()) + " sentences");
  const std::function<std::string(std::string_view)> html_escape = [this](std::string_view t) { return escape(t); };
  const std::function<std::string(std::string_view)> as_is = [](std::string_view t) { return std::string(t); };
  std::string out;
  for (const auto& part : parts_) {
    if (part.block < 0) {
      out += part.literal;
    } else {
      const TextBlock& block = blocks_[static_cast<size_t>(part.block)];
      out += project_markup(block, translations, block.html ? html_escape : as_is);
    }
  }
  return out;
}

WordAlignment concatenate_alignments(const std::vector<std::string>& sources,
                                     const std::vector<SentenceTranslation>& translations) {
  WordAlignment out;
  int32_t src = 0, tgt = 0;
  for (size_t j = 0; j < sources.size() && j < translations.size(); ++j) {
    for (const auto& [s, t] : translations[j].alignment) out.emplace_back(s + src, t + tgt);
    src += static_cast<int32_t>(whitespace_words(sources[j]).size());
    tgt += static_cast<int32_t>(whitespace_words(translations[j].text).size());
  }
  return out;
}

}  // namespace torchmt
