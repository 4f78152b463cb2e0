#include "formats/export.h"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <stdexcept>
#include <string_view>

#include "analysis/bubbles.h"
#include "formats/json_doc.h"
#include "formats/json_write.h"
#include "model/resources.h"
#include "model/summary.h"
#include "render/render_text.h"
#include "render/report_assets.h"  // generated from render/report/ by its embed.cmake

namespace mlprof {

namespace {

// Appends JSON text for an HTML <script type="application/json"> block.
// '<' occurs in JSON only inside strings, where "\u003c" means the same
// thing, so no "</script>" or "<!--" in a name or repr can end the block
// or switch the tokenizer into its escaped states.
void append_script_json(std::string& out, std::string_view json) {
  size_t from = 0;
  for (size_t at = json.find('<'); at != std::string_view::npos; at = json.find('<', from)) {
    out.append(json, from, at - from);
    out += "\\u003c";
    from = at + 1;
  }
  out.append(json, from);
}

using json_write::write_string;

// What the C++ core already formats, so the page shows the same text as
// print_tree instead of a JavaScript re-implementation: the format_io text
// of each I/O row (in document order) and each lane's title.
std::string report_extras(const Profile& p) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  w.Key("io_text");
  w.StartArray();
  for (const SpanIO& io : p.io) write_string(w, format_io(io.summary));
  w.EndArray();
  w.Key("lane_titles");
  w.StartArray();
  for (const std::string& title : lane_track_titles(p)) write_string(w, title);
  w.EndArray();
  // docs/design/analysis.md's resource view (model/resources.h): per resource, its calls
  // [span, slot, start_ns, end_ns, queued_from_ns] and its samples
  // [ts_ns, in_flight, queued].
  w.Key("resources");
  w.StartArray();
  for (const Resource& r : resource_view(p)) {
    w.StartObject();
    w.Key("name");
    write_string(w, p.functions.strings().get(r.name));
    w.Key("slots");
    w.Uint(r.slots);
    w.Key("peak_queued");
    w.Uint(r.peak_queued);
    w.Key("calls");
    w.StartArray();
    for (const ResourceCall& c : r.calls) {
      w.StartArray();
      w.Int(c.span);
      w.Uint(c.slot);
      w.Int64(c.start_ns);
      w.Int64(c.end_ns);
      w.Int64(c.queued_from_ns);
      w.EndArray();
    }
    w.EndArray();
    // Its instants (Profile::marks): [ts_ns, name].
    w.Key("marks");
    w.StartArray();
    for (const Mark& m : p.marks) {
      if (m.resource != r.name) continue;
      w.StartArray();
      w.Int64(m.ts_ns);
      write_string(w, p.functions.strings().get(m.name));
      w.EndArray();
    }
    w.EndArray();
    w.Key("samples");
    w.StartArray();
    for (const ResourceSample& s : r.samples) {
      w.StartArray();
      w.Int64(s.ts_ns);
      w.Uint(s.in_flight);
      w.Uint(s.queued);
      w.EndArray();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  // The idle gaps of at least 1 ms (mlprof bubbles' default), [start_ns,
  // end_ns], and whether anything said when lanes waited (else none can be seen).
  const BubbleReport bubbles = find_bubbles(p, 1'000'000);
  w.Key("bubbles");
  w.StartArray();
  for (const Bubble& b : bubbles.bubbles) {
    w.StartArray();
    w.Int64(b.start_ns);
    w.Int64(b.end_ns);
    w.EndArray();
  }
  w.EndArray();
  w.Key("bubble_wait_data");
  w.Bool(bubbles.wait_data);
  w.Key("io_roles");  // the report's role constants (model/summary.h)
  w.StartObject();
  w.Key("argument");
  w.Uint(static_cast<unsigned>(IORole::kArgument));
  w.Key("return");
  w.Uint(static_cast<unsigned>(IORole::kReturn));
  w.EndObject();
  w.Key("flags");  // [bit, name, words]: the report's flag constants (model/tree.h)
  w.StartArray();
  for (const SpanFlagName& f : kSpanFlagNames) {
    w.StartArray();
    w.Uint(f.bit);
    w.String(f.name);
    w.String(f.words);
    w.EndArray();
  }
  w.EndArray();
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace

std::string to_html_report(const Profile& p) {
  const std::string doc = to_json_document(p);
  const std::string extras = report_extras(p);
  std::string out;
  out.reserve(report::kHead.size() + report::kTail.size() + doc.size() + extras.size() + 256);
  out += report::kHead;
  out += "<script type=\"application/json\" id=\"mlprof-doc\">";
  append_script_json(out, doc);
  out += "</script>\n<script type=\"application/json\" id=\"mlprof-extras\">";
  append_script_json(out, extras);
  out += "</script>";
  out += report::kTail;
  return out;
}

std::string to_html_analysis(std::string_view payload) {
  rapidjson::Document doc;
  doc.Parse(payload.data(), payload.size());
  if (doc.HasParseError() || !doc.IsObject()) {
    throw std::invalid_argument("the analysis page's payload must be a JSON object");
  }
  std::string out;
  out.reserve(report::kAnalysisHead.size() + report::kAnalysisTail.size() + payload.size() + 128);
  out += report::kAnalysisHead;
  out += "<script type=\"application/json\" id=\"mlprof-analysis\">";
  append_script_json(out, payload);
  out += "</script>";
  out += report::kAnalysisTail;
  return out;
}

}  // namespace mlprof
