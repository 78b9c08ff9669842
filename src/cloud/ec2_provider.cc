#include "cloud/ec2_provider.h"

#include <fmt/format.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "aws/aws_xml.h"
#include "cloud/bootstrap.h"
#include "cloud/ec2_market_feed.h"
#include "cloud/provider_registry.h"
#include "core/base64.h"

namespace spot::cloud {
namespace {

constexpr char kVersion[] = "2016-11-15";

bool Throttled(const std::string& code) {
  return code == "RequestLimitExceeded" || code == "Throttling" || code == "ThrottlingException" ||
         code == "InternalError" || code == "Unavailable" || code == "ServiceUnavailable";
}

std::string FormEncode(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string out;
  for (const auto& [k, v] : params) {
    if (!out.empty()) out += '&';
    out += aws::UriEncode(k, false) + "=" + aws::UriEncode(v, false);
  }
  return out;
}

std::string Name(const xmlNode* n) { return reinterpret_cast<const char*>(n->name); }

std::string Text(const xmlNode* n) {
  xmlChar* c = xmlNodeGetContent(n);
  std::string s = c == nullptr ? "" : reinterpret_cast<const char*>(c);
  xmlFree(c);
  return s;
}

const xmlNode* Child(const xmlNode* n, std::string_view name) {
  if (n == nullptr) return nullptr;
  for (const xmlNode* c = n->children; c != nullptr; c = c->next) {
    if (c->type == XML_ELEMENT_NODE && name == Name(c)) return c;
  }
  return nullptr;
}

std::string ChildText(const xmlNode* n, std::string_view name) {
  const xmlNode* c = Child(n, name);
  return c == nullptr ? "" : Text(c);
}

void CollectInstances(const xmlNode* node, std::vector<Ec2InstanceState>* out) {
  for (const xmlNode* n = node; n != nullptr; n = n->next) {
    if (n->type != XML_ELEMENT_NODE) continue;
    if (Name(n) == "item" && Child(n, "instanceId") != nullptr &&
        Child(n, "instanceState") != nullptr) {
      Ec2InstanceState s;
      s.instance_id = ChildText(n, "instanceId");
      s.state = ChildText(Child(n, "instanceState"), "name");
      s.reason_code = ChildText(Child(n, "stateReason"), "code");
      s.reason_message = ChildText(Child(n, "stateReason"), "message");
      s.zone = ChildText(Child(n, "placement"), "availabilityZone");
      s.lifecycle = ChildText(n, "instanceLifecycle");
      if (const xmlNode* tags = Child(n, "tagSet")) {
        for (const xmlNode* t = tags->children; t != nullptr; t = t->next) {
          if (t->type == XML_ELEMENT_NODE) s.tags[ChildText(t, "key")] = ChildText(t, "value");
        }
      }
      out->push_back(std::move(s));
      continue;
    }
    CollectInstances(n->children, out);
  }
}

bool Ended(const std::string& state) {
  return state == "shutting-down" || state == "terminated" || state == "stopping" ||
         state == "stopped";
}

}  // namespace

Status MapEc2Error(const std::string& action, long http_status, const std::string& code,
                   const std::string& message) {
  std::string detail = fmt::format("EC2 {}: HTTP {}", action, http_status);
  if (!code.empty()) detail += " " + code;
  if (!message.empty()) detail += ": " + message;
  if (code == "InsufficientInstanceCapacity" || code == "SpotMaxPriceTooLow" ||
      code == "MaxSpotInstanceCountExceeded" || code == "InstanceLimitExceeded" ||
      code == "InsufficientCapacity") {
    return UnavailableError(detail + " (no capacity in this pool now)");
  }
  if (Throttled(code) || http_status >= 500 || http_status == 429) {
    return UnavailableError(detail + " (throttled or unavailable now)");
  }
  if (code == "UnauthorizedOperation" || code == "AuthFailure" || http_status == 401 ||
      http_status == 403) {
    return FailedPreconditionError(fmt::format(
        "{} (the credentials may not call ec2:{}: check the IAM policy and keys)", detail, action));
  }
  if (code.find("NotFound") != std::string::npos) return NotFoundError(detail);
  return InvalidArgumentError(detail);
}

namespace {

aws::AwsConfig WithEndpoint(aws::AwsConfig config) {
  if (config.endpoint.empty()) {
    config.endpoint = fmt::format("https://ec2.{}.amazonaws.com", config.region);
  }
  return config;
}

}  // namespace

Ec2Client::Ec2Client(aws::AwsConfig config, Ec2RetryOptions retry)
    : config_(WithEndpoint(std::move(config))),
      http_(config_.credentials, config_.region, "ec2",
            aws::RetryOptions{.max_attempts = retry.max_attempts,
                              .initial_backoff_s = retry.initial_backoff_s,
                              .max_backoff_s = retry.max_backoff_s,
                              .connect_timeout_s = 10,
                              .stall_timeout_s = 0,
                              .total_timeout_s = 120}) {}

Result<std::string> Ec2Client::Call(const std::string& action,
                                    std::vector<std::pair<std::string, std::string>> params) {
  params.emplace(params.begin(), "Version", kVersion);
  params.emplace(params.begin(), "Action", action);
  const std::string body = FormEncode(params);
  const aws::HttpRequest request{.method = "POST",
                                 .url = config_.endpoint + "/",
                                 .headers = {"Content-Type: application/x-www-form-urlencoded"},
                                 .body = body};
  std::string out;
  Status s = aws::RetryWithBackoff(http_.options(), [&](int) -> aws::AttemptOutcome {
    ++calls_;
    Result<aws::HttpResponse> got = http_.SendOnce(request);
    if (!got.ok()) {
      const StatusCode code = got.status().code();
      return {Status(code, "EC2 " + action + ": " + got.status().message()),
              code == StatusCode::kUnavailable};
    }
    if (got->status / 100 == 2) {
      out = std::move(got->body);
      return {Status::Ok()};
    }
    const std::string code = aws::XmlText(got->body, "Code");
    return {MapEc2Error(action, got->status, code, aws::XmlText(got->body, "Message")),
            Throttled(code) || got->status >= 500 || got->status == 429};
  });
  if (!s.ok()) return s;
  return out;
}

std::vector<Ec2InstanceState> ParseEc2Instances(const std::string& xml) {
  std::vector<Ec2InstanceState> out;
  if (xml.empty()) return out;
  xmlDoc* d = xmlReadMemory(xml.data(), static_cast<int>(xml.size()), "ec2.xml", nullptr,
                            XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  if (d == nullptr) return out;
  CollectInstances(xmlDocGetRootElement(d), &out);
  xmlFreeDoc(d);
  return out;
}

void DeclareFields(Ec2ProviderOptions& o, FieldVisitor& v) {
  v.String("region", &o.region,
           "AWS region of the instances; empty: AWS_REGION, AWS_DEFAULT_REGION, else us-east-1");
  v.String("image_id", &o.image_id,
           "AMI the instances boot (required): an image with `spot` and the job's files at the "
           "paths the job names");
  v.String("subnet_id", &o.subnet_id, "subnet of the instances; empty: the zone's default subnet");
  v.StringList("security_group_ids", &o.security_group_ids,
               "security groups of the instances (they must reach the controller's rendezvous)");
  v.String("key_name", &o.key_name, "EC2 key pair for SSH; empty: none");
  v.String("iam_instance_profile", &o.iam_instance_profile,
           "instance profile (name) whose role the workers use, e.g. to reach an S3 durable tier");
  v.Enum("allocation_strategy", &o.allocation_strategy,
         {"", "lowest-price", "price-capacity-optimized", "capacity-optimized", "diversified"},
         "CreateFleet (type instant) allocation strategy for spot launches that name no zone; "
         "empty: RunInstances in the chosen zone");
  v.Double("poll_interval_s", &o.poll_interval_s, {.min = 1},
           "simulated seconds between DescribeInstances calls (one call per interval, batched)");
  v.String("profile", &o.profile,
           "credentials profile of the shared credentials file; empty: AWS_ACCESS_KEY_ID/"
           "AWS_SECRET_ACCESS_KEY, else AWS_PROFILE, else default");
  v.Bool("price_feed", &o.price_feed,
         "decide on EC2's spot price history of the job's zones (DescribeSpotPriceHistory) "
         "instead of the replayed market");
}

std::string EncodeEc2InstanceData(const std::string& ec2_instance_id) {
  return nlohmann::json{{"instance_id", ec2_instance_id}}.dump();
}

Result<std::string> DecodeEc2InstanceData(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("instance_id") || !j["instance_id"].is_string()) {
    return InvalidArgumentError("EC2 provider data '" + text +
                                "': want {\"instance_id\": \"i-...\"}");
  }
  return j["instance_id"].get<std::string>();
}

Ec2Provider::Ec2Provider(std::unique_ptr<Ec2Client> client, Ec2ProviderOptions options)
    : opt_(std::move(options)), client_(std::move(client)) {}

Result<std::string> Ec2Provider::LaunchTemplate(const std::string& user_data) {
  // Named by the settings it holds (FNV-1a), so changed settings (or another
  // instance's user data) get another one.
  std::string settings =
      opt_.image_id + '\n' + user_data + '\n' + opt_.key_name + '\n' + opt_.iam_instance_profile;
  for (const std::string& g : opt_.security_group_ids) settings += '\n' + g;
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : settings) h = (h ^ c) * 1099511628211ull;
  const std::string name = fmt::format("spot-{}-{:016x}", opt_.job, h);
  if (templates_.count(name)) return name;
  std::vector<std::pair<std::string, std::string>> p = {
      {"LaunchTemplateName", name},
      {"LaunchTemplateData.ImageId", opt_.image_id},
      {"LaunchTemplateData.MetadataOptions.HttpTokens", "required"}};
  if (!user_data.empty()) p.emplace_back("LaunchTemplateData.UserData", Base64Encode(user_data));
  for (size_t i = 0; i < opt_.security_group_ids.size(); ++i) {
    p.emplace_back(fmt::format("LaunchTemplateData.SecurityGroupId.{}", i + 1),
                   opt_.security_group_ids[i]);
  }
  if (!opt_.key_name.empty()) p.emplace_back("LaunchTemplateData.KeyName", opt_.key_name);
  if (!opt_.iam_instance_profile.empty()) {
    p.emplace_back("LaunchTemplateData.IamInstanceProfile.Name", opt_.iam_instance_profile);
  }
  Result<std::string> made = client_->Call("CreateLaunchTemplate", p);
  // Made by an earlier controller of this job with the same settings: use it.
  if (!made.ok() && made.status().message().find("AlreadyExists") == std::string::npos) {
    return made.status();
  }
  templates_.insert(name);
  return name;
}

Result<InstanceView> Ec2Provider::Launch(const InstanceSpec& spec, double now_s) {
  if (spec.id.empty()) return InvalidArgumentError("EC2 launch: the instance id is empty");
  if (instances_.count(spec.id)) {
    return InvalidArgumentError("EC2 launch: instance '" + spec.id + "' exists already");
  }
  if (opt_.image_id.empty()) return InvalidArgumentError("EC2 launch: image_id (AMI) is not set");
  if (spec.instance_type.empty()) {
    return InvalidArgumentError("EC2 launch of '" + spec.id + "': no instance type");
  }
  std::vector<std::pair<std::string, std::string>> tags = {{"spot:job", opt_.job},
                                                           {"spot:instance", spec.id}};
  std::string user_data;
  if (opt_.user_data) {
    Result<std::string> made = opt_.user_data(spec);
    if (!made.ok()) return made.status().WithContext("EC2 launch of '" + spec.id + "': user data");
    user_data = std::move(made).value();
  }
  std::string xml;
  const bool fleet = spec.spot && spec.zone_name.empty() && !opt_.allocation_strategy.empty();
  if (fleet) {
    SPOT_ASSIGN_OR_RETURN(std::string tmpl, LaunchTemplate(user_data));
    std::vector<std::pair<std::string, std::string>> p = {
        {"Type", "instant"},
        {"TargetCapacitySpecification.TotalTargetCapacity", "1"},
        {"TargetCapacitySpecification.DefaultTargetCapacityType", "spot"},
        {"SpotOptions.AllocationStrategy", opt_.allocation_strategy},
        {"LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateName", tmpl},
        {"LaunchTemplateConfigs.1.LaunchTemplateSpecification.Version", "$Latest"},
        {"LaunchTemplateConfigs.1.Overrides.1.InstanceType", spec.instance_type},
        {"TagSpecification.1.ResourceType", "instance"}};
    if (!opt_.subnet_id.empty()) {
      p.emplace_back("LaunchTemplateConfigs.1.Overrides.1.SubnetId", opt_.subnet_id);
    }
    if (spec.max_price > 0) {
      p.emplace_back("SpotOptions.MaxTotalPrice", fmt::format("{:.5f}", spec.max_price));
    }
    for (size_t i = 0; i < tags.size(); ++i) {
      p.emplace_back(fmt::format("TagSpecification.1.Tag.{}.Key", i + 1), tags[i].first);
      p.emplace_back(fmt::format("TagSpecification.1.Tag.{}.Value", i + 1), tags[i].second);
    }
    SPOT_ASSIGN_OR_RETURN(xml, client_->Call("CreateFleet", p));
  } else {
    std::vector<std::pair<std::string, std::string>> p = {
        {"ImageId", opt_.image_id},
        {"InstanceType", spec.instance_type},
        {"MinCount", "1"},
        {"MaxCount", "1"},
        {"ClientToken", opt_.job + "/" + spec.id},
        {"TagSpecification.1.ResourceType", "instance"}};
    for (size_t i = 0; i < tags.size(); ++i) {
      p.emplace_back(fmt::format("TagSpecification.1.Tag.{}.Key", i + 1), tags[i].first);
      p.emplace_back(fmt::format("TagSpecification.1.Tag.{}.Value", i + 1), tags[i].second);
    }
    if (!spec.zone_name.empty()) p.emplace_back("Placement.AvailabilityZone", spec.zone_name);
    if (!opt_.subnet_id.empty()) p.emplace_back("SubnetId", opt_.subnet_id);
    for (size_t i = 0; i < opt_.security_group_ids.size(); ++i) {
      p.emplace_back(fmt::format("SecurityGroupId.{}", i + 1), opt_.security_group_ids[i]);
    }
    if (!opt_.key_name.empty()) p.emplace_back("KeyName", opt_.key_name);
    if (!opt_.iam_instance_profile.empty()) {
      p.emplace_back("IamInstanceProfile.Name", opt_.iam_instance_profile);
    }
    if (!user_data.empty()) p.emplace_back("UserData", Base64Encode(user_data));
    // IMDSv2 only: the worker reads its notices with a session token.
    p.emplace_back("MetadataOptions.HttpTokens", "required");
    if (spec.spot) {
      p.emplace_back("InstanceMarketOptions.MarketType", "spot");
      p.emplace_back("InstanceMarketOptions.SpotOptions.SpotInstanceType", "one-time");
      p.emplace_back("InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior", "terminate");
      if (spec.max_price > 0) {
        p.emplace_back("InstanceMarketOptions.SpotOptions.MaxPrice",
                       fmt::format("{:.5f}", spec.max_price));
      }
    }
    SPOT_ASSIGN_OR_RETURN(xml, client_->Call("RunInstances", p));
  }
  std::string ec2_id;
  if (fleet) {
    std::vector<std::string> ids = aws::XmlTexts(xml, "instanceIds", "item");
    if (ids.empty()) {
      const std::string code = aws::XmlText(xml, "errorCode");
      return MapEc2Error("CreateFleet", 200, code.empty() ? "NoInstance" : code,
                         aws::XmlText(xml, "errorMessage"));
    }
    ec2_id = ids.front();
  } else {
    std::vector<Ec2InstanceState> got = ParseEc2Instances(xml);
    if (got.empty()) return InternalError("EC2 RunInstances: no instance in the answer");
    ec2_id = got.front().instance_id;
  }
  Instance inst;
  inst.view.spec = spec;
  inst.view.provider_data = EncodeEc2InstanceData(ec2_id);
  inst.view.launched_s = now_s;
  inst.ec2_id = ec2_id;
  spdlog::info("EC2: launched {} as {} ({} {}{})", spec.id, ec2_id, spec.instance_type,
               spec.spot ? "spot" : "on-demand",
               spec.zone_name.empty() ? "" : " in " + spec.zone_name);
  InstanceView view = inst.view;
  instances_[spec.id] = std::move(inst);
  return view;
}

Status Ec2Provider::Terminate(const std::string& id, double now_s) {
  auto it = instances_.find(id);
  if (it == instances_.end()) return NotFoundError("EC2: no instance '" + id + "'");
  Instance& inst = it->second;
  if (inst.view.state != InstanceState::kRunning) return Status::Ok();
  inst.terminating = true;
  Result<std::string> r = client_->Call("TerminateInstances", {{"InstanceId.1", inst.ec2_id}});
  if (!r.ok() && r.status().code() != StatusCode::kNotFound) {
    inst.terminating = false;
    return r.status();
  }
  inst.view.state = InstanceState::kTerminated;
  inst.view.process_running = false;
  inst.view.ended_s = now_s;
  return Status::Ok();
}

std::vector<InstanceView> Ec2Provider::List() const {
  std::vector<InstanceView> out;
  for (const auto& [id, inst] : instances_) out.push_back(inst.view);
  return out;
}

Result<std::vector<ProviderEvent>> Ec2Provider::Poll(double now_s) {
  std::vector<ProviderEvent> events;
  if (now_s - last_poll_s_ < opt_.poll_interval_s) {
    if (!last_poll_error_.ok()) return last_poll_error_;
    return events;
  }
  std::vector<std::pair<std::string, std::string>> p;
  std::map<std::string, Instance*> by_ec2;
  for (auto& [id, inst] : instances_) {
    if (inst.view.state != InstanceState::kRunning) continue;
    by_ec2[inst.ec2_id] = &inst;
    p.emplace_back(fmt::format("InstanceId.{}", by_ec2.size()), inst.ec2_id);
  }
  last_poll_s_ = now_s;
  last_poll_error_ = Status::Ok();
  if (by_ec2.empty()) return events;
  Result<std::string> xml = client_->Call("DescribeInstances", p);
  // The API did not answer: what happened meanwhile is seen at the next poll
  // that gets an answer (the caller decides how long to wait for one).
  if (!xml.ok()) return last_poll_error_ = xml.status().WithContext("EC2 poll");
  std::set<std::string> seen;
  for (const Ec2InstanceState& s : ParseEc2Instances(*xml)) {
    seen.insert(s.instance_id);
    auto it = by_ec2.find(s.instance_id);
    if (it == by_ec2.end() || !Ended(s.state)) continue;
    Instance& inst = *it->second;
    inst.view.state = InstanceState::kPreempted;
    inst.view.process_running = false;
    inst.view.ended_s = now_s;
    std::string why = s.reason_code.empty() ? s.state : s.reason_code;
    if (!s.reason_message.empty()) why += ": " + s.reason_message;
    events.push_back({ProviderEvent::Kind::kPreempted, inst.view.spec.id, now_s,
                      fmt::format("{} ({}) {}: {}", inst.ec2_id, inst.view.spec.id, s.state, why)});
  }
  for (auto& [ec2_id, inst] : by_ec2) {
    if (seen.count(ec2_id) || inst->view.state != InstanceState::kRunning) continue;
    inst->view.state = InstanceState::kPreempted;
    inst->view.process_running = false;
    inst->view.ended_s = now_s;
    events.push_back({ProviderEvent::Kind::kPreempted, inst->view.spec.id, now_s,
                      ec2_id + " is gone (not in DescribeInstances)"});
  }
  return events;
}

Status Ec2Provider::Adopt(const InstanceView& recorded, double now_s) {
  const std::string& id = recorded.spec.id;
  std::string ec2_id;
  if (!recorded.provider_data.empty()) {
    SPOT_ASSIGN_OR_RETURN(ec2_id, DecodeEc2InstanceData(recorded.provider_data));
  }
  Result<std::string> xml =
      ec2_id.empty() ? client_->Call("DescribeInstances", {{"Filter.1.Name", "tag:spot:instance"},
                                                           {"Filter.1.Value.1", id},
                                                           {"Filter.2.Name", "tag:spot:job"},
                                                           {"Filter.2.Value.1", opt_.job}})
                     : client_->Call("DescribeInstances", {{"InstanceId.1", ec2_id}});
  Instance inst;
  inst.view = recorded;
  if (!xml.ok() && xml.status().code() != StatusCode::kNotFound) return xml.status();
  std::vector<Ec2InstanceState> got;
  if (xml.ok()) got = ParseEc2Instances(*xml);
  const Ec2InstanceState* live = nullptr;
  for (const Ec2InstanceState& s : got) {
    if (!Ended(s.state)) live = &s;
  }
  if (live == nullptr) {
    inst.ec2_id = ec2_id;
    inst.view.state = InstanceState::kLost;
    inst.view.process_running = false;
    inst.view.ended_s = now_s;
    instances_[id] = std::move(inst);
    return NotFoundError(
        fmt::format("EC2: instance '{}' ({}) is gone", id, ec2_id.empty() ? "by its tag" : ec2_id));
  }
  inst.ec2_id = live->instance_id;
  inst.view.provider_data = EncodeEc2InstanceData(inst.ec2_id);
  inst.view.state = InstanceState::kRunning;
  instances_[id] = std::move(inst);
  return Status::Ok();
}

Result<std::vector<Ec2SpotPrice>> DescribeSpotPrices(Ec2Client& client,
                                                     const std::string& instance_type,
                                                     const std::vector<std::string>& zones,
                                                     const std::string& start_time) {
  std::vector<Ec2SpotPrice> out;
  std::string token;
  for (int page = 0; page < 1000; ++page) {
    std::vector<std::pair<std::string, std::string>> p = {{"InstanceType.1", instance_type},
                                                          {"ProductDescription.1", "Linux/UNIX"}};
    if (!start_time.empty()) p.emplace_back("StartTime", start_time);
    if (zones.size() == 1) p.emplace_back("AvailabilityZone", zones.front());
    if (!token.empty()) p.emplace_back("NextToken", token);
    SPOT_ASSIGN_OR_RETURN(std::string xml, client.Call("DescribeSpotPriceHistory", p));
    std::vector<std::string> zs = aws::XmlTexts(xml, "item", "availabilityZone");
    std::vector<std::string> types = aws::XmlTexts(xml, "item", "instanceType");
    std::vector<std::string> prices = aws::XmlTexts(xml, "item", "spotPrice");
    std::vector<std::string> times = aws::XmlTexts(xml, "item", "timestamp");
    const size_t n = std::min({zs.size(), types.size(), prices.size(), times.size()});
    for (size_t i = 0; i < n; ++i) {
      if (!zones.empty() && std::find(zones.begin(), zones.end(), zs[i]) == zones.end()) continue;
      char* end = nullptr;
      const double price = std::strtod(prices[i].c_str(), &end);
      if (end == prices[i].c_str() || *end != '\0' || !std::isfinite(price) || price < 0) {
        return InvalidArgumentError(
            fmt::format("EC2 DescribeSpotPriceHistory: spot price '{}' of {} in {} is not a price",
                        prices[i], types[i], zs[i]));
      }
      out.push_back({zs[i], types[i], price, times[i]});
    }
    token = aws::XmlText(xml, "nextToken");
    if (token.empty()) break;
  }
  return out;
}

Result<std::vector<std::string>> OfferedZones(Ec2Client& client, const std::string& instance_type) {
  std::vector<std::string> out;
  std::string token;
  for (int page = 0; page < 1000; ++page) {
    std::vector<std::pair<std::string, std::string>> p = {{"LocationType", "availability-zone"},
                                                          {"Filter.1.Name", "instance-type"},
                                                          {"Filter.1.Value.1", instance_type}};
    if (!token.empty()) p.emplace_back("NextToken", token);
    SPOT_ASSIGN_OR_RETURN(std::string xml, client.Call("DescribeInstanceTypeOfferings", p));
    for (std::string& z : aws::XmlTexts(xml, "item", "location")) out.push_back(std::move(z));
    token = aws::XmlText(xml, "nextToken");
    if (token.empty()) break;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

namespace {

// The job's zones priced by EC2 (Ec2MarketFeed), on the market's tick grid
// with tick `start_tick` at the job's start, known up to that tick.
Status AttachPriceFeed(Ec2Provider& provider, const ProviderContext& c) {
  const market::Trace& first = *c.zones.front();
  Ec2MarketFeedOptions f{
      .instance_type = c.instance_type.empty() ? first.pool.instance_type : c.instance_type,
      .gap_seconds = first.gap_seconds,
      .start_unix_s = c.wall_epoch_unix_s - static_cast<double>(c.start_tick) * first.gap_seconds};
  for (const market::Trace* z : c.zones) f.zones.push_back(z->pool.zone);
  Result<std::unique_ptr<Ec2MarketFeed>> made =
      Ec2MarketFeed::Create(&provider.client(), std::move(f));
  if (!made.ok()) return made.status().WithContext("provider ec2: the price feed");
  // The controller starts deciding at the job's first tick: the feed must
  // know it by then.
  if (Status s = (*made)->Advance(c.start_tick); !s.ok()) {
    return Status(s.code(),
                  fmt::format("provider ec2: the price feed at the job's start: {} (the market's "
                              "zones must be EC2 zones offering resources.instance_type; or set "
                              "provider.price_feed: false "
                              "to decide on the replayed market)",
                              s.message()));
  }
  provider.set_feed(std::move(made).value());
  return Status::Ok();
}

}  // namespace

// The EC2 provider of a job: the client from the environment (or the
// profile), each instance's bootstrap rendered at its launch from the
// worker's command line, the job's rendezvous and its durable tier, and
// (price_feed) the job's zones priced by EC2.
Result<std::unique_ptr<Provider>> MakeEc2Provider(Ec2ProviderOptions o, const ProviderContext& c) {
  if (o.image_id.empty()) {
    return InvalidArgumentError(
        "provider.image_id: required for `ec2`: the AMI the instances boot (with `spot` and the "
        "job's files installed)");
  }
  Result<aws::AwsConfig> config = aws::AwsConfigFromEnvironment("EC2", o.profile);
  if (!config.ok()) return config.status().WithContext("provider ec2");
  if (!o.region.empty()) config->region = o.region;
  auto client = std::make_unique<Ec2Client>(*std::move(config), Ec2RetryOptions{});
  o.job = c.job_name.empty() ? o.job : c.job_name;
  if (c.command) {
    o.user_data = [c](const InstanceSpec& spec) -> Result<std::string> {
      // The instance's local disk: the same path as on this machine (the
      // bootstrap makes it).
      const std::string local_dir = (std::filesystem::path(c.instances_dir) / spec.id).string();
      return RenderBootstrap({.job = c.job_name,
                              .instance_id = spec.id,
                              .argv = c.command(spec, local_dir),
                              .local_dir = local_dir,
                              .rendezvous_url = c.rendezvous_url,
                              .checkpoint_location = c.checkpoint_location,
                              .comment = "SpotTrain instance " + spec.id +
                                         " (EC2 user data; notices come from IMDSv2)"});
    };
  }
  auto provider = std::make_unique<Ec2Provider>(std::move(client), o);
  if (o.price_feed && !c.zones.empty()) SPOT_RETURN_IF_ERROR(AttachPriceFeed(*provider, c));
  return std::unique_ptr<Provider>(std::move(provider));
}

}  // namespace spot::cloud
