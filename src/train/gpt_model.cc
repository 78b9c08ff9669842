#include "train/gpt_model.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>
#include <limits>
#include <string>

namespace spot::train {
namespace {

namespace nn = torch::nn;

using enum LayerKind;

// Submodules run their layers through the model's LayerPrecision under these
// names (the state dict's module names; "attn.core" is the attention itself).
class CausalSelfAttention : public nn::Module {
 public:
  CausalSelfAttention(const GptSpec& s, LayerPrecision* lp, const std::string& prefix)
      : lp_(lp),
        c_attn_name_(prefix + "c_attn"),
        core_name_(prefix + "core"),
        c_proj_name_(prefix + "c_proj"),
        heads_(s.heads),
        c_attn_(register_module("c_attn", nn::Linear(s.width, 3 * s.width))),
        c_proj_(register_module("c_proj", nn::Linear(s.width, s.width))),
        attn_dropout_(register_module("attn_dropout", nn::Dropout(s.dropout))),
        resid_dropout_(register_module("resid_dropout", nn::Dropout(s.dropout))),
        mask_(at::ones({s.context, s.context}, at::kBool).tril()) {}

  nn::Linear& c_proj() { return c_proj_; }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor qkv = lp_->Run(c_attn_name_, kCompute, x, c_attn_);
    at::Tensor y = lp_->Run(core_name_, kCompute, qkv, [&](auto& in) { return Attend(in); });
    return resid_dropout_(lp_->Run(c_proj_name_, kCompute, y, c_proj_));
  }

 private:
  // Causal attention over qkv [b, t, 3c] -> [b, t, c].
  at::Tensor Attend(const at::Tensor& qkv_all) {
    const int64_t b = qkv_all.size(0), t = qkv_all.size(1), c = qkv_all.size(2) / 3;
    const int64_t hs = c / heads_;
    std::vector<at::Tensor> qkv = qkv_all.split(c, 2);
    auto heads = [&](const at::Tensor& z) { return z.view({b, t, heads_, hs}).transpose(1, 2); };
    at::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
    at::Tensor att = q.matmul(k.transpose(-2, -1)).mul(1.0 / std::sqrt(static_cast<double>(hs)));
    // Built on the host; moved once to the model's device.
    if (mask_.device() != att.device()) mask_ = mask_.to(att.device());
    at::Tensor allowed = mask_.slice(0, 0, t).slice(1, 0, t);
    att = att.masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
    // Softmax in float32 whatever the precision of the scores (bf16 under autocast).
    att = attn_dropout_(att.to(at::kFloat).softmax(-1));
    return att.matmul(v).transpose(1, 2).contiguous().view({b, t, c});
  }

  LayerPrecision* lp_;
  std::string c_attn_name_, core_name_, c_proj_name_;
  int64_t heads_;
  nn::Linear c_attn_;
  nn::Linear c_proj_;
  nn::Dropout attn_dropout_;
  nn::Dropout resid_dropout_;
  at::Tensor mask_;  // [context, context], true where a position may attend
};

class Mlp : public nn::Module {
 public:
  Mlp(const GptSpec& s, LayerPrecision* lp, const std::string& prefix)
      : lp_(lp),
        c_fc_name_(prefix + "c_fc"),
        c_proj_name_(prefix + "c_proj"),
        c_fc_(register_module("c_fc", nn::Linear(s.width, 4 * s.width))),
        c_proj_(register_module("c_proj", nn::Linear(4 * s.width, s.width))),
        dropout_(register_module("dropout", nn::Dropout(s.dropout))) {}

  nn::Linear& c_proj() { return c_proj_; }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = lp_->Run(c_fc_name_, kCompute, x, c_fc_);
    return dropout_(lp_->Run(c_proj_name_, kCompute, at::gelu(h), c_proj_));
  }

 private:
  LayerPrecision* lp_;
  std::string c_fc_name_, c_proj_name_;
  nn::Linear c_fc_;
  nn::Linear c_proj_;
  nn::Dropout dropout_;
};

class Block : public nn::Module {
 public:
  Block(const GptSpec& s, LayerPrecision* lp, const std::string& prefix)
      : lp_(lp),
        ln_1_name_(prefix + "ln_1"),
        ln_2_name_(prefix + "ln_2"),
        ln_1_(register_module("ln_1", nn::LayerNorm(nn::LayerNormOptions({s.width})))),
        attn_(register_module("attn",
                              std::make_shared<CausalSelfAttention>(s, lp, prefix + "attn."))),
        ln_2_(register_module("ln_2", nn::LayerNorm(nn::LayerNormOptions({s.width})))),
        mlp_(register_module("mlp", std::make_shared<Mlp>(s, lp, prefix + "mlp."))) {}

  CausalSelfAttention& attn() { return *attn_; }
  Mlp& mlp() { return *mlp_; }

  at::Tensor forward(at::Tensor x) {
    x = x + attn_->forward(lp_->Run(ln_1_name_, kNormalization, x, ln_1_));
    return x + mlp_->forward(lp_->Run(ln_2_name_, kNormalization, x, ln_2_));
  }

 private:
  LayerPrecision* lp_;
  std::string ln_1_name_, ln_2_name_;
  nn::LayerNorm ln_1_;
  std::shared_ptr<CausalSelfAttention> attn_;
  nn::LayerNorm ln_2_;
  std::shared_ptr<Mlp> mlp_;
};

class Transformer : public nn::Module {
 public:
  Transformer(const GptSpec& s, LayerPrecision* lp)
      : wte(register_module("wte", nn::Embedding(s.vocab, s.width))),
        wpe(register_module("wpe", nn::Embedding(s.context, s.width))),
        drop(register_module("drop", nn::Dropout(s.dropout))),
        h(register_module("h", nn::ModuleList())),
        ln_f(register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({s.width})))) {
    for (int64_t i = 0; i < s.layers; ++i) {
      auto block = std::make_shared<Block>(s, lp, fmt::format("transformer.h.{}.", i));
      blocks.push_back(block);
      h->push_back(block);
    }
  }

  nn::Embedding wte;
  nn::Embedding wpe;
  nn::Dropout drop;
  nn::ModuleList h;
  nn::LayerNorm ln_f;
  std::vector<std::shared_ptr<Block>> blocks;
};

class Gpt final : public Net {
 public:
  explicit Gpt(const GptSpec& s)
      : tf_(register_module("transformer", std::make_shared<Transformer>(s, &lp_))) {
    Initialize(s.layers);
  }

  at::Tensor forward(const at::Tensor& idx) override {
    const int64_t t = idx.size(1);
    at::Tensor pos = at::arange(t, idx.options().dtype(at::kLong));
    at::Tensor x = tf_->drop(tf_->wte(idx) + tf_->wpe(pos));
    for (auto& block : tf_->blocks) x = block->forward(x);
    x = lp_.Run("transformer.ln_f", kNormalization, x, tf_->ln_f);
    // The output layer, tied to the token embedding.
    return lp_.Run("lm_head", kCompute, x,
                   [&](auto& in) { return at::linear(in, tf_->wte->weight); });
  }
  LayerPrecision* layer_precision() override { return &lp_; }

 private:
  // nanoGPT's: every Linear and Embedding weight N(0, 0.02), biases zero, the
  // projections into the residual stream N(0, 0.02 / sqrt(2 * layers)).
  void Initialize(int64_t layers) {
    at::NoGradGuard no_grad;
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* lin = m->as<nn::Linear>()) {
        nn::init::normal_(lin->weight, 0.0, 0.02);
        if (lin->bias.defined()) nn::init::zeros_(lin->bias);
      } else if (auto* emb = m->as<nn::Embedding>()) {
        nn::init::normal_(emb->weight, 0.0, 0.02);
      }
    }
    const double resid = 0.02 / std::sqrt(2.0 * static_cast<double>(layers));
    for (auto& block : tf_->blocks) {
      nn::init::normal_(block->attn().c_proj()->weight, 0.0, resid);
      nn::init::normal_(block->mlp().c_proj()->weight, 0.0, resid);
    }
  }

  LayerPrecision lp_;  // before tf_: its submodules hold a pointer to it
  std::shared_ptr<Transformer> tf_;
};

}  // namespace

std::shared_ptr<Net> MakeGpt(const GptSpec& spec) { return std::make_shared<Gpt>(spec); }

}  // namespace spot::train
