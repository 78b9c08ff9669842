#include "aws/aws_xml.h"

#include <libxml/parser.h>
#include <libxml/tree.h>

#include <memory>
#include <mutex>

namespace spot::aws {
namespace {

void InitParser() {
  static std::once_flag once;
  std::call_once(once, [] { xmlInitParser(); });
}

const xmlNode* FindElement(const xmlNode* node, std::string_view name) {
  for (const xmlNode* n = node; n != nullptr; n = n->next) {
    if (n->type != XML_ELEMENT_NODE) continue;
    if (name == reinterpret_cast<const char*>(n->name)) return n;
    if (const xmlNode* found = FindElement(n->children, name)) return found;
  }
  return nullptr;
}

std::string Text(const xmlNode* n) {
  xmlChar* c = xmlNodeGetContent(n);
  std::string s = c == nullptr ? "" : reinterpret_cast<const char*>(c);
  xmlFree(c);
  return s;
}

void CollectTexts(const xmlNode* node, std::string_view parent, std::string_view leaf,
                  std::vector<std::string>* out) {
  for (const xmlNode* n = node; n != nullptr; n = n->next) {
    if (n->type != XML_ELEMENT_NODE) continue;
    if (parent == reinterpret_cast<const char*>(n->name)) {
      for (const xmlNode* c = n->children; c != nullptr; c = c->next) {
        if (c->type == XML_ELEMENT_NODE && leaf == reinterpret_cast<const char*>(c->name)) {
          out->push_back(Text(c));
        }
      }
    } else {
      CollectTexts(n->children, parent, leaf, out);
    }
  }
}

std::unique_ptr<xmlDoc, void (*)(xmlDoc*)> ParseXml(std::string_view doc) {
  InitParser();
  xmlDoc* d = doc.empty()
                  ? nullptr
                  : xmlReadMemory(doc.data(), static_cast<int>(doc.size()), "aws.xml", nullptr,
                                  XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  return {d, [](xmlDoc* p) { xmlFreeDoc(p); }};
}

}  // namespace

std::string XmlText(std::string_view doc, std::string_view name) {
  auto d = ParseXml(doc);
  if (d == nullptr) return "";
  const xmlNode* n = FindElement(xmlDocGetRootElement(d.get()), name);
  return n == nullptr ? "" : Text(n);
}

std::vector<std::string> XmlTexts(std::string_view doc, std::string_view parent,
                                  std::string_view leaf) {
  std::vector<std::string> out;
  auto d = ParseXml(doc);
  if (d != nullptr) CollectTexts(xmlDocGetRootElement(d.get()), parent, leaf, &out);
  return out;
}

}  // namespace spot::aws
