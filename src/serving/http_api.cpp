#include "serving/http_api.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "torchmt/util/strings.h"
#include "util/utf8.h"

namespace torchmt {
namespace {

using nlohmann::json;

// The media type without parameters, lower case: "application/json; charset=utf-8" -> "application/json".
std::string media_type(const std::string& content_type) {
  std::string type = content_type.substr(0, content_type.find(';'));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.pop_back();
  while (!type.empty() && (type.front() == ' ' || type.front() == '\t')) type.erase(0, 1);
  for (auto& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return type;
}

bool looks_like_json(const std::string& body) {
  const auto first = body.find_first_not_of(" \t\r\n");
  return first != std::string::npos && body[first] == '{';
}

void require_utf8(const std::string& body) {
  if (auto at = find_invalid_utf8(body))
    throw ApiError(400, "request body is not valid UTF-8 (byte " + std::to_string(*at) + ")");
}

json parse_json_object(const std::string& body) {
  json doc;
  try {
    doc = json::parse(body);
  } catch (const json::exception& e) {
    // A syntax error, or a number beyond a double (out_of_range.406: found by fuzzing):
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." -> from "parse error".
    std::string what = e.what();
    const auto at = what.find("] ");
    throw ApiError(400, "invalid JSON: " + escape_control(at == std::string::npos ? what : what.substr(at + 2)));
  }
  if (!doc.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return doc;
}

// q: a string or a list of strings, each one text of one or more lines.
std::vector<std::string> texts_of(const json& q, bool& list) {
  std::vector<std::string> texts;
  if (q.is_string()) {
    list = false;
    texts.push_back(q.get<std::string>());
  } else if (q.is_array()) {
    list = true;
    for (const auto& item : q) {
      if (!item.is_string()) throw ApiError(400, "Invalid request: q must be a string or a list of strings");
      texts.push_back(item.get<std::string>());
    }
  } else {
    throw ApiError(400, "Invalid request: q must be a string or a list of strings");
  }
  return texts;
}

// Code points: bytes that do not start one (10xxxxxx) are continuation bytes.
int64_t count_chars(const std::string& s) {
  int64_t chars = 0;
  for (unsigned char c : s) chars += (c & 0xC0) != 0x80;
  return chars;
}

// --char-limit (or the API key's): LibreTranslate's error for a text over it.
void check_char_limit(const std::vector<std::string>& texts, const ApiSettings& settings) {
  if (settings.char_limit < 0) return;
  for (const auto& text : texts)
    if (count_chars(text) > settings.char_limit)
      throw ApiError(400, "Invalid request: request (" + std::to_string(count_chars(text)) + ") exceeds text limit (" +
                              std::to_string(settings.char_limit) + ")");
}

// Each text's lines become sentences (a text with line breaks keeps them in its answer); with
// `splitter` or for HTML, each text is a document of sentences.
void split_into_sentences(const std::vector<std::string>& texts, const ApiLimits& limits, ApiRequest& request,
                          DocumentFormat format = DocumentFormat::kText, const SentenceSplitter* splitter = nullptr) {
  const bool documents = format == DocumentFormat::kHtml || splitter;
  const int64_t max_text_chars = limits.max_sentences * limits.max_sentence_chars;
  for (const auto& text : texts) {
    if (documents) {
      // The caps apply before parsing: a document holds at most what its sentences may.
      if (count_chars(text) > max_text_chars)
        throw ApiError(413, "a text of " + std::to_string(count_chars(text)) + " characters (at most " +
                                std::to_string(max_text_chars) + ")");
      request.documents.emplace_back(text, format, splitter);
      const auto& sentences = request.documents.back().sentences();
      request.sentences.insert(request.sentences.end(), sentences.begin(), sentences.end());
      request.lines_per_text.push_back(sentences.size());
      if (static_cast<int64_t>(request.sentences.size()) > limits.max_sentences)
        throw ApiError(413, "too many sentences: at most " + std::to_string(limits.max_sentences) + " per request");
      continue;
    }
    size_t lines = 0;
    for (size_t begin = 0;;) {
      size_t end = text.find('\n', begin);
      std::string line = text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      request.sentences.push_back(std::move(line));
      ++lines;
      if (static_cast<int64_t>(request.sentences.size()) > limits.max_sentences)
        throw ApiError(413, "too many sentences: at most " + std::to_string(limits.max_sentences) +
                                " lines per request");
      if (end == std::string::npos) break;
      begin = end + 1;
    }
    request.lines_per_text.push_back(lines);
  }
  for (size_t i = 0; i < request.sentences.size(); ++i) {
    const int64_t chars = count_chars(request.sentences[i]);
    if (chars > limits.max_sentence_chars)
      throw ApiError(413, "sentence " + std::to_string(i + 1) + " has " + std::to_string(chars) +
                              " characters (at most " + std::to_string(limits.max_sentence_chars) + ")");
  }
}

void check_options(const RequestOptions& o, const ApiLimits& limits) {
  const auto& s = o.search;
  if (s.beam_size < 1 || s.beam_size > limits.max_beam)
    throw ApiError(400, "beam must be between 1 and " + std::to_string(limits.max_beam));
  if (s.nbest < 1 || s.nbest > s.beam_size) throw ApiError(400, "nbest must be between 1 and beam");
  if (!std::isfinite(s.length_penalty) || s.length_penalty < 0 || s.length_penalty > 10)
    throw ApiError(400, "lenpen must be between 0 and 10");
  if (!std::isfinite(s.max_len_a) || s.max_len_a < 0 || s.max_len_a > 100)
    throw ApiError(400, "max_len_a must be between 0 and 100");
  if (s.max_len_b < 0 || s.max_len_b > 100000) throw ApiError(400, "max_len_b must be between 0 and 100000");
  if (const std::string sampling = sampling_problem(s, false); !sampling.empty()) throw ApiError(400, sampling);
  if (const std::string rules = search_rules_problem(s, false, "min_len"); !rules.empty()) throw ApiError(400, rules);
  if (o.attention_layer < -1000 || o.attention_layer > 1000 || o.attention_head < -1 || o.attention_head > 1000)
    throw ApiError(400, "attention_layer or attention_head out of range");
  if (!std::isfinite(o.reverse_weight) || o.reverse_weight < 0 || o.reverse_weight > 10)
    throw ApiError(400, "reverse_weight must be between 0 and 10");
  if (o.reverse_weight > 0 && s.beam_size < 2)
    throw ApiError(400, "reverse_weight reranks a beam: ask for beam 2 or more");
  if (o.format != "text" && o.format != "html")
    throw ApiError(400, "format '" + escape_control(o.format) + "' is not supported (text or html)");
  if (o.format == "html" && o.confidence) throw ApiError(400, "confidence is for format text");
  if (o.format == "html" && (o.search.nbest > 1 || o.alignments || o.attention))
    throw ApiError(400, "format html answers one translation of each document: no alternatives, nbest, "
                        "alignments or attention");
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string form_decode(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%') {
      const int hi = i + 2 < s.size() ? hex_value(s[i + 1]) : -1;
      const int lo = i + 2 < s.size() ? hex_value(s[i + 2]) : -1;
      if (hi < 0 || lo < 0) throw ApiError(400, "invalid form encoding: a '%' not followed by two hex digits");
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

const OptionTable<RequestOptions>& request_option_table() {
  using R = RequestOptions;
  static const auto table =
      OptionTable<R>("request")
          .add("beam", [](R& r) -> int64_t& { return r.search.beam_size; }, "beam size (1 = greedy)")
          .add("lenpen", [](R& r) -> double& { return r.search.length_penalty; }, "GNMT length penalty alpha")
          .add("max_len_a", [](R& r) -> double& { return r.search.max_len_a; },
               "output length at most max_len_a * source length + max_len_b")
          .add("max_len_b", [](R& r) -> int64_t& { return r.search.max_len_b; }, "see max_len_a")
          .add("nbest", [](R& r) -> int64_t& { return r.search.nbest; }, "hypotheses per sentence (<= beam)")
          .add("early_exit", [](R& r) -> bool& { return r.search.early_exit; },
               "beam search ends a sentence when its best candidate ends it (not after beam finished hypotheses)")
          .add("patience", [](R& r) -> double& { return r.search.patience; },
               "beam search runs until round(beam x patience) hypotheses are finished (1 = beam)")
          .add("scores", &R::scores, "answer each sentence's hypotheses with their scores")
          .add("sampling_topk", [](R& r) -> int64_t& { return r.search.sampling_topk; },
               "sample from the K most probable tokens (1 = no sampling; 0 = all); needs beam 1")
          .add("sampling_topp", [](R& r) -> double& { return r.search.sampling_topp; },
               "sample from the smallest set holding this much probability (0 < P <= 1)")
          .add("sampling_temperature", [](R& r) -> double& { return r.search.sampling_temperature; },
               "divide the log-probabilities by T before sampling (T > 0)")
          .add("seed", [](R& r) -> int64_t& { return r.search.seed; },
               "sampling's seed (a request's sentence i always samples the same with the same seed)")
          .add("min_len", [](R& r) -> int64_t& { return r.search.min_length; },
               "no end of sentence before this many output pieces (0 = off)")
          .add("disable_unk", [](R& r) -> bool& { return r.search.disable_unk; }, "never output the unknown piece")
          .add("no_repeat_ngram_size", [](R& r) -> int64_t& { return r.search.no_repeat_ngram_size; },
               "no sequence of this many pieces twice in one output (0 = off)")
          .add("repetition_penalty", [](R& r) -> double& { return r.search.repetition_penalty; },
               "multiply the log-probability of a piece already in the output by this (1 = off)")
          .add("attention", &R::attention, "answer each sentence's cross-attention (weights, pieces and an SVG)")
          .add("attention_layer", &R::attention_layer, "decoder layer of the attention (-1 = last)")
          .add("attention_head", &R::attention_head, "head of the attention (-1 = mean over heads)")
          .add("alignments", &R::alignments,
               "answer each sentence's word alignment (Pharaoh pairs source-target of whitespace-separated words)")
          .add("api_key", &R::api_key, "the client's API key (servers started with --api-keys)")
          .add("source", &R::source, "the source language (needed when the server serves several directions)")
          .add("target", &R::target, "the target language (needed when the server serves several directions)")
          .add("confidence", &R::confidence,
               "answer each sentence's confidence and its words' (0..1; the model's probabilities, or the server's "
               "--confidence-model calibration)")
          .add("format", &R::format,
               "text, or html: each text is an HTML document (tags kept, inline tags placed by the alignments)")
          .add("split_sentences", &R::split_sentences,
               "split each line into sentences and translate them one by one (always for html)")
          .add("reverse_weight", &R::reverse_weight,
               "rerank the beam by score(translation | source) + W x score(source | translation), the second by "
               "the model translating the other way (0 = off; default: the server's --reverse-weight for a beam)");
  return table;
}

std::vector<std::pair<std::string, std::string>> parse_form(const std::string& body) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t begin = 0; begin <= body.size();) {
    size_t end = body.find('&', begin);
    if (end == std::string::npos) end = body.size();
    const std::string field = body.substr(begin, end - begin);
    if (!field.empty()) {
      const size_t eq = field.find('=');
      out.emplace_back(form_decode(field.substr(0, eq)),
                       eq == std::string::npos ? std::string() : form_decode(field.substr(eq + 1)));
    }
    begin = end + 1;
  }
  return out;
}

namespace {

// A request's fields: a JSON object, or a form's keys (the first of repeated ones) as strings.
json read_body_fields(const std::string& content_type, const std::string& body) {
  const std::string type = media_type(content_type);
  if (type == "application/json" || (type.empty() && looks_like_json(body))) {
    require_utf8(body);
    return parse_json_object(body);
  }
  if (type == "application/x-www-form-urlencoded" || type.empty()) {
    json doc = json::object();
    for (auto& [key, value] : parse_form(body)) {
      require_utf8(value);
      require_utf8(key);
      if (!doc.contains(key)) doc[key] = value;  // the first of repeated keys
    }
    return doc;
  }
  throw ApiError(415, "unsupported content type '" + escape_control(type) +
                          "' (application/json or application/x-www-form-urlencoded)");
}

std::string string_field(const json& doc, const char* key) {
  if (!doc.contains(key) || doc[key].is_null()) return "";
  if (!doc[key].is_string()) throw ApiError(400, std::string("Invalid request: ") + key + " must be a string");
  return doc[key].get<std::string>();
}

bool serves_source(const ApiSettings& s, const std::string& code) {
  return std::any_of(s.pairs.begin(), s.pairs.end(), [&](const LanguagePair& p) { return p.source == code; });
}

bool serves_target(const ApiSettings& s, const std::string& code) {
  return std::any_of(s.pairs.begin(), s.pairs.end(), [&](const LanguagePair& p) { return p.target == code; });
}

std::vector<std::string> request_texts(const json& doc) {
  // LibreTranslate's `if not q`: an empty text or list is missing too.
  if (!doc.contains("q") || doc["q"].is_null() || (doc["q"].is_string() && doc["q"].get<std::string>().empty()) ||
      (doc["q"].is_array() && doc["q"].empty()))
    throw ApiError(400, "Invalid request: missing q parameter");
  bool list = false;
  return texts_of(doc["q"], list);
}

}  // namespace

std::string request_api_key(const std::string& content_type, const std::string& body) {
  try {
    const json doc = read_body_fields(content_type, body);
    return doc.contains("api_key") && doc["api_key"].is_string() ? doc["api_key"].get<std::string>() : std::string();
  } catch (const ApiError&) {
    return "";  // the endpoint's own parsing says what is wrong with the body
  }
}

DetectRequest parse_detect_request(const std::string& content_type, const std::string& body) {
  const json doc = read_body_fields(content_type, body);
  DetectRequest request;
  request.texts = request_texts(doc);
  request.list = doc["q"].is_array();
  request.api_key = string_field(doc, "api_key");
  return request;
}

LibreTranslateRequest read_libretranslate_request(const std::string& content_type, const std::string& body,
                                                  const ApiSettings& settings) {
  const json doc = read_body_fields(content_type, body);
  LibreTranslateRequest request;
  request.texts = request_texts(doc);
  request.list = doc["q"].is_array();
  request.source = string_field(doc, "source");
  request.target = string_field(doc, "target");
  request.api_key = string_field(doc, "api_key");
  // One served direction (or a model that recorded none) makes both optional; with several, a
  // missing source is detected and a missing target must be the only one reachable.
  if (request.source.empty()) {
    if (settings.pairs.size() == 1) request.source = settings.pairs.front().source;
    else if (settings.identifier && !settings.pairs.empty()) request.source = "auto";
    else if (!settings.pairs.empty()) throw ApiError(400, "Invalid request: missing source parameter");
  }
  if (request.target.empty()) {
    std::vector<std::string> targets;
    for (const auto& p : settings.pairs)
      if ((request.source == "auto" || p.source == request.source) &&
          std::find(targets.begin(), targets.end(), p.target) == targets.end())
        targets.push_back(p.target);
    if (targets.size() == 1) request.target = targets.front();
    else if (!settings.pairs.empty()) throw ApiError(400, "Invalid request: missing target parameter");
  }
  request.options.search = settings.search;
  if (doc.contains("alternatives") && !doc["alternatives"].is_null()) {
    const auto& a = doc["alternatives"];
    int64_t n = 0;
    if (a.is_number_unsigned()) {  // (beyond int64's range it would wrap to a negative count)
      n = static_cast<int64_t>(std::min<uint64_t>(a.get<uint64_t>(), INT32_MAX));
    } else if (a.is_number_integer()) {
      n = a.get<int64_t>();
    } else if (a.is_string()) {
      const std::string text = a.get<std::string>();
      char* end = nullptr;
      n = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || n < INT32_MIN || n > INT32_MAX)
        throw ApiError(400, "Invalid request: alternatives parameter is not a number");
    } else {
      throw ApiError(400, "Invalid request: alternatives parameter is not a number");
    }
    n = std::max<int64_t>(0, n);  // as LibreTranslate: max(0, n)
    if (n + 1 > settings.limits.max_beam)
      throw ApiError(400, "Invalid request: alternatives parameter must be <= " + std::to_string(settings.limits.max_beam - 1));
    request.options.search.nbest = n + 1;
    request.options.search.beam_size = std::max(request.options.search.beam_size, n + 1);
  }
  if (request.options.search.beam_size >= 2) request.options.reverse_weight = settings.reverse_weight;
  if (settings.batch_limit >= 0 && request.list && static_cast<int64_t>(request.texts.size()) > settings.batch_limit)
    throw ApiError(400, "Invalid request: request (" + std::to_string(request.texts.size()) + ") exceeds text limit (" +
                            std::to_string(settings.batch_limit) + ")");
  check_char_limit(request.texts, settings);
  if (!settings.pairs.empty()) {
    if (request.source != "auto" && !serves_source(settings, request.source))
      throw ApiError(400, escape_control(request.source) + " is not supported");
    if (!serves_target(settings, request.target)) throw ApiError(400, escape_control(request.target) + " is not supported");
  }
  const std::string format = string_field(doc, "format");
  if (!format.empty()) request.options.format = format;
  if (request.options.format != "text" && request.options.format != "html")
    throw ApiError(400, escape_control(request.options.format) + " format is not supported");
  // An extension: LibreTranslate has no confidence; asked for, the answer carries it.
  if (doc.contains("confidence") && !doc["confidence"].is_null()) {
    const auto& c = doc["confidence"];
    if (c.is_boolean()) request.options.confidence = c.get<bool>();
    else if (c.is_string() && (c == "true" || c == "false")) request.options.confidence = c == "true";
    else throw ApiError(400, "Invalid request: confidence must be true or false");
  }
  check_options(request.options, settings.limits);
  return request;
}

size_t libretranslate_route(const ApiSettings& settings, const std::string& source, const std::string& target) {
  if (settings.pairs.empty()) return 0;
  for (size_t i = 0; i < settings.pairs.size(); ++i)
    if (settings.pairs[i].source == source && settings.pairs[i].target == target) return i;
  throw ApiError(400, language_name(target) + " (" + escape_control(target) +
                          ") is not available as a target language from " + language_name(source) + " (" +
                          escape_control(source) + ")");
}

ApiRequest libretranslate_job(const LibreTranslateRequest& request, const std::vector<size_t>& texts,
                              const std::string& source, const ApiSettings& settings) {
  ApiRequest job;
  job.list = request.list;
  job.options = request.options;
  std::vector<std::string> selected;
  for (size_t i : texts) selected.push_back(request.texts.at(i));
  const SentenceSplitter splitter(SentenceSplitter::supports(source) ? source : "de");
  split_into_sentences(selected, settings.limits, job, parse_document_format(job.options.format), &splitter);
  return job;
}

LanguageGuess detect_source(const ApiSettings& settings, const std::string& text, const std::string& target) {
  if (!settings.identifier) {  // no identifier: the one source that goes to the target, if there is one
    for (const auto& p : settings.pairs)
      if (p.target == target) return {p.source, 0.0};
    return {"", 0.0};
  }
  const auto guesses = settings.identifier->detect(text);
  for (const auto& g : guesses) {
    if (g.language == target) return g;
    for (const auto& p : settings.pairs)
      if (p.source == g.language && p.target == target) return g;
  }
  return guesses.front();
}

ApiRequest parse_libretranslate_request(const std::string& content_type, const std::string& body,
                                        const ApiSettings& settings) {
  const LibreTranslateRequest request = read_libretranslate_request(content_type, body, settings);
  std::string source = request.source;
  if (source == "auto") source = detect_source(settings, request.texts.front(), request.target).language;
  if (!settings.pairs.empty()) libretranslate_route(settings, source, request.target);
  std::vector<size_t> all(request.texts.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return libretranslate_job(request, all, source, settings);
}

size_t v1_route(const ApiSettings& settings, const RequestOptions& options) {
  if (settings.pairs.size() <= 1 && options.source.empty() && options.target.empty()) return 0;
  std::vector<size_t> matches;
  for (size_t i = 0; i < settings.pairs.size(); ++i)
    if ((options.source.empty() || settings.pairs[i].source == options.source) &&
        (options.target.empty() || settings.pairs[i].target == options.target))
      matches.push_back(i);
  if (matches.size() == 1) return matches.front();
  if (matches.empty())
    throw ApiError(400, "this server does not translate " + escape_control(options.source.empty() ? "*" : options.source) +
                            " to " + escape_control(options.target.empty() ? "*" : options.target) + " (GET /languages)");
  throw ApiError(400, "this server translates several directions: give source and target");
}

ApiRequest parse_v1_request(const std::string& content_type, const std::string& body, const ApiSettings& settings) {
  const std::string type = media_type(content_type);
  // A JSON object sent as a form or as text (curl -d's default) is read as JSON too.
  const bool lenient = type.empty() || type == "application/x-www-form-urlencoded" || type == "text/plain";
  if (!(type == "application/json" || (lenient && looks_like_json(body))))
    throw ApiError(415, "unsupported content type '" + escape_control(type) + "' (a JSON object)");
  require_utf8(body);
  const json doc = parse_json_object(body);
  if (!doc.contains("q")) throw ApiError(400, "Invalid request: missing q parameter");
  ApiRequest request;
  const auto texts = texts_of(doc["q"], request.list);
  check_char_limit(texts, settings);
  // The options through their table, so names, types and errors are the table's.
  FlatConfig config;
  for (const auto& [key, value] : doc.items()) {
    if (key == "q" || key == "target_prefix" || key == "constraints") continue;
    if (value.is_string()) config.set(key, value.get<std::string>());
    else if (value.is_boolean() || value.is_number()) config.set(key, value.dump());
    else throw ApiError(400, "option '" + escape_control(key) + "' must be a single value");
  }
  RequestOptions start;
  start.search = settings.search;
  start.reverse_weight = settings.reverse_weight;
  try {
    request.options = request_option_table().read(config, start, false);
  } catch (const std::invalid_argument& e) {
    throw ApiError(400, e.what());
  }
  // The server's weight reranks the requests that have a beam; one asked for needs it.
  if (!doc.contains("reverse_weight") && request.options.search.beam_size < 2) request.options.reverse_weight = 0;
  check_options(request.options, settings.limits);
  const auto format = parse_document_format(request.options.format);
  const bool documents = format == DocumentFormat::kHtml || request.options.split_sentences;
  if (documents && (doc.contains("target_prefix") || doc.contains("constraints")))
    throw ApiError(400, "target_prefix and constraints steer one sentence per line: not with split_sentences or "
                        "format html");
  const std::string source = settings.pairs.empty() ? "" : settings.pairs[v1_route(settings, request.options)].source;
  const SentenceSplitter splitter(SentenceSplitter::supports(source) ? source : "de");
  split_into_sentences(texts, settings.limits, request, format, documents ? &splitter : nullptr);
  if (doc.contains("target_prefix")) {
    bool list = false;
    std::vector<std::string> prefixes;
    try {
      prefixes = texts_of(doc["target_prefix"], list);
    } catch (const ApiError&) {
      throw ApiError(400, "Invalid request: target_prefix must be shaped as q (a string or a list of strings)");
    }
    if (list != request.list || prefixes.size() != texts.size())
      throw ApiError(400, "Invalid request: target_prefix must be shaped as q (" +
                              std::string(request.list ? "a list of " + std::to_string(texts.size()) + " strings" : "a string") + ")");
    ApiRequest lines;
    split_into_sentences(prefixes, settings.limits, lines);
    if (lines.lines_per_text != request.lines_per_text)
      throw ApiError(400, "Invalid request: target_prefix must have as many lines as q, text for text");
    request.target_prefixes = std::move(lines.sentences);
  }
  if (doc.contains("constraints")) {
    // Shaped as q: a list of phrases for a string, a list of such lists for a list; a text with
    // constraints is one line (they could not say which of its lines must hold them).
    const std::string shape = request.list ? "a list of " + std::to_string(texts.size()) + " lists of strings"
                                           : "a list of strings";
    const json& field = doc["constraints"];
    auto phrases_of = [&](const json& list) {
      if (!list.is_array()) throw ApiError(400, "Invalid request: constraints must be shaped as q (" + shape + ")");
      std::vector<std::string> phrases;
      for (const auto& p : list) {
        if (!p.is_string()) throw ApiError(400, "Invalid request: constraints must be shaped as q (" + shape + ")");
        phrases.push_back(p.get<std::string>());
      }
      return phrases;
    };
    std::vector<std::vector<std::string>> per_text;
    if (!request.list) {
      per_text.push_back(phrases_of(field));
    } else {
      if (!field.is_array() || field.size() != texts.size())
        throw ApiError(400, "Invalid request: constraints must be shaped as q (" + shape + ")");
      for (const auto& item : field) per_text.push_back(phrases_of(item));
    }
    for (size_t t = 0; t < per_text.size(); ++t) {
      if (per_text[t].empty()) continue;
      if (request.lines_per_text[t] != 1)
        throw ApiError(400, "Invalid request: a text with constraints must be one line (send its lines as a list)");
      if (request.options.search.sampling())
        throw ApiError(400, "Invalid request: constraints need beam search: they cannot be combined with sampling");
    }
    size_t sentence = 0;
    request.constraints.resize(request.sentences.size());
    for (size_t t = 0; t < per_text.size(); ++t) {
      if (!per_text[t].empty()) request.constraints[sentence] = std::move(per_text[t]);
      sentence += request.lines_per_text[t];
    }
  }
  return request;
}

std::string error_json(const std::string& message) {
  return json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace torchmt
