#pragma once
/// \file
/// \brief nn::MoE — a mixture-of-experts feed-forward layer (GShard / Switch Transformer): a
/// gate picks each token's top-k experts, each expert (an Mlp: dim -> hidden -> GELU -> dim)
/// takes at most `capacity` tokens, and the token's output is the gate-weighted sum of its
/// experts' outputs (a token every choice of which overflowed gets zero: a residual around the
/// layer carries it). An auxiliary load-balancing loss, weight × E Σ_e f_e P_e (f_e: the share of
/// tokens whose first choice is e, P_e: e's mean gate probability), is added to the pass's loss.
///
/// Expert-parallel inside epl::Split: rank r of N holds experts [r E/N, (r+1) E/N) and routes
/// tokens [r T/N, (r+1) T/N) of the (replicated) input: all_to_all dispatches them to their
/// experts' ranks and brings the outputs back, and an all-gather makes the output whole again.
/// The gate runs replicated, so every rank makes the same routing and dropping decisions.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "epl/nn/activation.hpp"
#include "epl/nn/linear.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// \brief Where each token goes: its top-k experts, gate weights and which choices fit.
struct Routing {
  std::int64_t tokens = 0, experts = 0, k = 1, capacity = 0;
  std::vector<std::int64_t> expert;  ///< [tokens k]: the expert of choice j of token t at t k + j
  std::vector<double> weight;        ///< [tokens k]: its gate weight
  std::vector<char> accepted;        ///< [tokens k]: it fit in the expert's capacity
  std::vector<std::vector<std::int64_t>> by_expert;  ///< expert e's accepted choices (t k + j), in slot order
  std::vector<double> first_share;   ///< [experts]: f_e, the share of tokens whose first choice is e
  std::vector<double> mean_prob;     ///< [experts]: P_e
  double aux = 0;                    ///< E sum_e f_e P_e
  std::int64_t dropped = 0;          ///< choices that did not fit

  /// \brief Routes tokens by their gate probabilities [tokens, experts] (row-major): top-k by
  /// probability (ties: the lower expert), weights p (k = 1) or p normalised over the k chosen;
  /// capacity ceil(factor tokens k / experts), filled in the order of (choice, token).
  static Routing make(const std::vector<double>& probs, std::int64_t tokens, std::int64_t experts, std::int64_t k, double factor) {
    Routing r;
    r.tokens = tokens;
    r.experts = experts;
    r.k = k;
    // No expert can take more than all tokens k choices: a larger factor means "drop none" (clamped
    // in double first; a factor of 1e19 used to overflow the integer and drop tokens silently).
    const double wanted = std::ceil(factor * static_cast<double>(tokens * k) / static_cast<double>(experts));
    r.capacity = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::min(wanted, static_cast<double>(tokens * k))));
    r.expert.resize(static_cast<std::size_t>(tokens * k));
    r.weight.resize(r.expert.size());
    r.accepted.assign(r.expert.size(), 0);
    r.by_expert.resize(static_cast<std::size_t>(experts));
    r.first_share.assign(static_cast<std::size_t>(experts), 0.0);
    r.mean_prob.assign(static_cast<std::size_t>(experts), 0.0);
    std::vector<std::int64_t> order(static_cast<std::size_t>(experts));
    for (std::int64_t t = 0; t < tokens; ++t) {
      const double* p = probs.data() + t * experts;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](std::int64_t a, std::int64_t b) {
        return p[a] > p[b] || (p[a] == p[b] && a < b);
      });
      double sum = 0;
      for (std::int64_t j = 0; j < k; ++j) sum += p[order[static_cast<std::size_t>(j)]];
      for (std::int64_t j = 0; j < k; ++j) {
        const auto e = order[static_cast<std::size_t>(j)];
        r.expert[static_cast<std::size_t>(t * k + j)] = e;
        r.weight[static_cast<std::size_t>(t * k + j)] = k == 1 ? p[e] : p[e] / sum;
      }
      r.first_share[static_cast<std::size_t>(order[0])] += 1.0 / static_cast<double>(tokens);
      for (std::int64_t e = 0; e < experts; ++e) r.mean_prob[static_cast<std::size_t>(e)] += p[e] / static_cast<double>(tokens);
    }
    std::vector<std::int64_t> used(static_cast<std::size_t>(experts), 0);
    for (std::int64_t j = 0; j < k; ++j)
      for (std::int64_t t = 0; t < tokens; ++t) {
        const auto c = static_cast<std::size_t>(t * k + j);
        const auto e = static_cast<std::size_t>(r.expert[c]);
        if (used[e] < r.capacity) {
          ++used[e];
          r.accepted[c] = 1;
          r.by_expert[e].push_back(static_cast<std::int64_t>(c));
        } else {
          ++r.dropped;
        }
      }
    for (std::int64_t e = 0; e < experts; ++e)
      r.aux += static_cast<double>(experts) * r.first_share[static_cast<std::size_t>(e)] * r.mean_prob[static_cast<std::size_t>(e)];
    return r;
  }
};

/// \brief A mixture-of-experts feed-forward layer over [..., dim] (see the file comment).
class MoE {
 public:
  struct Options {
    std::int64_t dim = 0, hidden = 0, experts = 0;
    std::int64_t top_k = 1;          ///< 1 (Switch) or 2 (GShard)
    double capacity_factor = 1.25;   ///< capacity = ceil(factor tokens k / experts)
    double aux_weight = 0.01;        ///< the load-balancing loss's weight
  };
  Linear gate;   ///< dim -> experts, no bias
  Parameter w1;  ///< [experts, hidden, dim]
  Parameter b1;  ///< [experts, hidden]
  Parameter w2;  ///< [experts, dim, hidden]
  Parameter b2;  ///< [experts, dim]

  MoE() = default;
  explicit MoE(Options o)
      : gate((check(o), o.dim), o.experts, false),  // its sizes checked before the gate, which would name itself
        w1(Shape{o.experts, o.hidden, o.dim}, Init::uniform(1.0 / std::sqrt(static_cast<double>(o.dim)))),
        b1(Shape{o.experts, o.hidden}, Init::uniform(1.0 / std::sqrt(static_cast<double>(o.dim)))),
        w2(Shape{o.experts, o.dim, o.hidden}, Init::uniform(1.0 / std::sqrt(static_cast<double>(o.hidden)))),
        b2(Shape{o.experts, o.dim}, Init::uniform(1.0 / std::sqrt(static_cast<double>(o.hidden)))),
        opt_(o) {}

 private:
  static void check(const Options& o) {
    EPL_CHECK(o.dim > 0 && o.hidden > 0 && o.experts > 0, "MoE(dim ", o.dim, ", hidden ", o.hidden, ", experts ", o.experts,
              "): the sizes must be positive");
    EPL_CHECK(o.top_k == 1 || o.top_k == 2, "MoE: top_k = ", o.top_k, "; choose 1 (Switch) or 2 (GShard)");
    EPL_CHECK(o.top_k <= o.experts, "MoE: top_k = ", o.top_k, " with ", o.experts, " experts");
    EPL_CHECK(o.capacity_factor > 0 && std::isfinite(o.capacity_factor), "MoE: capacity_factor = ", o.capacity_factor,
              " must be a finite positive number (any factor of experts / top_k or more drops no token)");
    EPL_CHECK(o.aux_weight >= 0 && std::isfinite(o.aux_weight), "MoE: aux_weight = ", o.aux_weight, " must be finite and not negative");
  }

 public:
  [[nodiscard]] const Options& options() const noexcept { return opt_; }
  template <class V> void visit(V&& v) {
    v("gate", gate);
    v("w1", w1);
    v("b1", b1);
    v("w2", w2);
    v("b2", b2);
  }

  /// \brief Runs expert-parallel as part `part` of a split group (before materialize): this
  /// rank's experts' weights only. The expert count must divide by the parts.
  void parallelize(SplitPart part) {
    const std::string what = "MoE(" + std::to_string(opt_.experts) + " experts)";
    w1.shard_along(0, part.index, part.parts, what + ".w1 (its experts)");
    b1.shard_along(0, part.index, part.parts, what + ".b1");
    w2.shard_along(0, part.index, part.parts, what + ".w2");
    b2.shard_along(0, part.index, part.parts, what + ".b2");
    part_ = part;
  }
  /// \brief The tokens a forward takes must be a multiple of this: the split group's ranks, which
  /// each route their share (1 when the layer runs whole). The planner reads it, with the tokens
  /// the probe's batch gave (last_routing), to offer only micro-batches that divide.
  [[nodiscard]] std::int64_t token_multiple() const noexcept { return part_.parts; }
  /// \brief Choices dropped for want of capacity, and choices routed, since the layer was made.
  [[nodiscard]] std::int64_t dropped() const noexcept { return dropped_; }
  [[nodiscard]] std::int64_t routed() const noexcept { return routed_; }
  /// \brief The last forward's routing (its auxiliary loss, shares, drops).
  [[nodiscard]] const Routing& last_routing() const noexcept { return last_; }

  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    EPL_CHECK(x.shape().back() == opt_.dim, "MoE(dim ", opt_.dim, ") got input ", x.shape(), "; its last dimension must be ", opt_.dim);
    const auto& d = ctx.device();
    const std::int64_t T = x.shape().rows(), E = opt_.experts, n = part_.parts;
    EPL_CHECK(T % n == 0, "MoE: ", T, T == 1 ? " token does" : " tokens do", " not divide among the split group's ", n,
              " ranks (each routes its share of the tokens); make the tokens per micro-batch a multiple of ", n);
    const Tensor flat = x.view({T, opt_.dim});
    Tensor probs = ctx.empty({T, E}, x.dtype());
    d.softmax_rows(nn::forward(gate, ctx, flat), probs);
    Routing r = route(d, probs);
    if (ctx.training()) {
      ctx.add_loss(opt_.aux_weight * r.aux);
      dropped_ += r.dropped;
      routed_ += T * opt_.top_k;
    }
    // This rank's tokens' choices, in the order of their experts (dispatch order), with the rows
    // each rank receives from each rank for its experts.
    Plan p = plan(r);
    Tensor sent = ctx.empty({static_cast<std::int64_t>(p.send_choice.size()), opt_.dim}, x.dtype());
    d.gather_rows(flat, index_tensor(ctx, p.send_token), sent);
    Tensor got = exchange(ctx, sent, p.send_rows, p.recv_rows);  // [rows for my experts, dim], by source
    // this rank's experts over their rows, grouped by expert
    Tensor grouped = ctx.empty(got.shape(), x.dtype());
    d.gather_rows(got, index_tensor(ctx, p.group_order), grouped);
    Tensor hidden = ctx.empty({grouped.dim(0), opt_.hidden}, x.dtype()), act = ctx.empty_like(hidden);
    Tensor out_grouped = ctx.empty(grouped.shape(), x.dtype());
    for (std::int64_t e = 0, row = 0; e < E / n; ++e) {
      const std::int64_t rows = p.expert_rows[static_cast<std::size_t>(e)];
      if (rows > 0) {
        const Tensor xe = grouped.slice(row, row + rows), he = hidden.slice(row, row + rows), oe = out_grouped.slice(row, row + rows);
        d.gemm(xe, false, expert(w1, e, opt_.hidden, opt_.dim), true, he, 1, 0, ctx.matmul());
        d.add_row_vector(he, b1.value.slice(e, e + 1).view({opt_.hidden}));
        d.gelu(he, act.slice(row, row + rows));
        d.gemm(act.slice(row, row + rows), false, expert(w2, e, opt_.dim, opt_.hidden), true, oe, 1, 0, ctx.matmul());
        d.add_row_vector(oe, b2.value.slice(e, e + 1).view({opt_.dim}));
      }
      row += rows;
    }
    Tensor out_by_source = ctx.empty(got.shape(), x.dtype());
    d.gather_rows(out_grouped, index_tensor(ctx, p.ungroup_order), out_by_source);
    Tensor back = exchange(ctx, out_by_source, p.recv_rows, p.send_rows);  // my choices' expert outputs, dispatch order
    Tensor mine = ctx.empty({T / n, opt_.dim}, x.dtype());
    d.fill(mine, 0.0);
    d.scatter_add_rows(back, index_tensor(ctx, p.send_local_token), weight_tensor(ctx, r, p.send_choice, x.dtype()), mine);
    Tensor y = all_gather_rows(ctx, mine, x.shape());
    Tensor send_token = index_tensor(ctx, p.send_token);  // before p moves into the saved object
    ctx.save(this, {probs, grouped, hidden, act, back, send_token}, std::make_shared<const Pass>(Pass{std::move(r), std::move(p)}));
    return y;
  }

  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy_in) {
    Saved s = ctx.restore(this);
    const Pass& pass = s.get<Pass>();
    const Routing& r = pass.routing;
    const Plan& p = pass.plan;
    const Tensor &probs = s[0], &grouped = s[1], &hidden = s[2], &act = s[3], &back = s[4], &send_token = s[5];
    const auto& d = ctx.device();
    const std::int64_t T = probs.dim(0), E = opt_.experts, n = part_.parts, k = opt_.top_k;
    const Tensor dy = dy_in.view({T, opt_.dim});
    // the gate weights' gradient: dy . expert output, per dispatched choice
    Tensor dy_sent = ctx.empty(back.shape(), back.dtype());
    d.gather_rows(dy, send_token, dy_sent);
    Tensor dweight = ctx.empty({back.dim(0)}, back.dtype());
    d.row_dot(dy_sent, back, dweight);
    // the experts' output gradient: weight x dy, to the experts' ranks
    Tensor dout_sent = ctx.empty(back.shape(), back.dtype());
    d.fill(dout_sent, 0.0);
    d.scatter_add_rows(dy_sent, index_tensor(ctx, iota(back.dim(0))), weight_tensor(ctx, r, p.send_choice, back.dtype()), dout_sent);
    Tensor dout_got = exchange(ctx, dout_sent, p.send_rows, p.recv_rows);
    Tensor dout = ctx.empty(dout_got.shape(), back.dtype());
    d.gather_rows(dout_got, index_tensor(ctx, p.group_order), dout);
    Tensor dx_grouped = ctx.empty(grouped.shape(), back.dtype()), dact = ctx.empty(hidden.shape(), back.dtype()),
           dh = ctx.empty(hidden.shape(), back.dtype());
    for (std::int64_t e = 0, row = 0; e < E / n; ++e) {
      const std::int64_t rows = p.expert_rows[static_cast<std::size_t>(e)];
      if (rows > 0) {
        const Tensor de = dout.slice(row, row + rows), ae = act.slice(row, row + rows), dae = dact.slice(row, row + rows);
        const Tensor dhe = dh.slice(row, row + rows);
        d.gemm(de, true, ae, false, expert(w2.grad, e, opt_.dim, opt_.hidden), 1, 1, ctx.matmul());  // dW2 += dout^T act
        d.sum_rows(de, b2.grad.slice(e, e + 1).view({opt_.dim}), 1);
        d.gemm(de, false, expert(w2.value, e, opt_.dim, opt_.hidden), false, dae, 1, 0, ctx.matmul());    // dact = dout W2
        d.gelu_backward(hidden.slice(row, row + rows), dae, dhe);
        d.gemm(dhe, true, grouped.slice(row, row + rows), false, expert(w1.grad, e, opt_.hidden, opt_.dim), 1, 1, ctx.matmul());
        d.sum_rows(dhe, b1.grad.slice(e, e + 1).view({opt_.hidden}), 1);
        d.gemm(dhe, false, expert(w1.value, e, opt_.hidden, opt_.dim), false, dx_grouped.slice(row, row + rows), 1, 0, ctx.matmul());
      }
      row += rows;
    }
    Tensor dx_by_source = ctx.empty(dx_grouped.shape(), back.dtype());
    d.gather_rows(dx_grouped, index_tensor(ctx, p.ungroup_order), dx_by_source);
    Tensor dx_back = exchange(ctx, dx_by_source, p.recv_rows, p.send_rows);
    Tensor dx_mine = ctx.empty({T / n, opt_.dim}, back.dtype());
    d.fill(dx_mine, 0.0);
    d.scatter_add_rows(dx_back, index_tensor(ctx, p.send_local_token), Tensor{}, dx_mine);
    // the gate probabilities' gradient: this rank's tokens' from their weights, then all tokens',
    // plus the balancing loss's (the same on every rank)
    std::vector<double> dw(static_cast<std::size_t>(back.dim(0)));
    download_doubles(d, dweight, dw);
    std::vector<double> prob(static_cast<std::size_t>(T * E));
    download_doubles(d, probs, prob);
    std::vector<double> dprob_mine(static_cast<std::size_t>(T / n * E), 0.0);
    const std::int64_t t0 = part_.index * (T / n);
    std::vector<double> dweight_choice(static_cast<std::size_t>(T / n * k), 0.0);
    for (std::size_t i = 0; i < p.send_choice.size(); ++i) dweight_choice[static_cast<std::size_t>(p.send_choice[i] - t0 * k)] = dw[i];
    for (std::int64_t t = t0; t < t0 + T / n; ++t) {
      const auto* c = &r.expert[static_cast<std::size_t>(t * k)];
      const double* pt = &prob[static_cast<std::size_t>(t * E)];
      double* g = &dprob_mine[static_cast<std::size_t>((t - t0) * E)];
      const double* dwt = &dweight_choice[static_cast<std::size_t>((t - t0) * k)];
      if (k == 1) {
        g[c[0]] += dwt[0];
      } else {  // w_j = p_j / (p_0 + p_1)
        const double p0 = pt[c[0]], p1 = pt[c[1]], s2 = (p0 + p1) * (p0 + p1);
        g[c[0]] += p1 * (dwt[0] - dwt[1]) / s2;
        g[c[1]] += p0 * (dwt[1] - dwt[0]) / s2;
      }
    }
    Tensor dprob = ctx.empty({T, E}, back.dtype());
    {
      Tensor part = ctx.empty({T / n, E}, back.dtype());
      upload_doubles(d, dprob_mine, part);
      all_gather_rows_into(ctx, part, dprob);
    }
    if (opt_.aux_weight > 0) {  // d(weight E sum f_e P_e)/d p_te = weight E f_e / T, f held constant
      std::vector<double> aux(static_cast<std::size_t>(T * E));
      const double scale = ctx.options().loss_scale * opt_.aux_weight * static_cast<double>(E) / static_cast<double>(T);
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t e = 0; e < E; ++e) aux[static_cast<std::size_t>(t * E + e)] = scale * r.first_share[static_cast<std::size_t>(e)];
      Tensor a = ctx.empty({T, E}, back.dtype());
      upload_doubles(d, aux, a);
      d.add(dprob, a, dprob);
    }
    Tensor dlogits = ctx.empty({T, E}, back.dtype());
    d.softmax_rows_backward(probs, dprob, dlogits);
    Tensor dx = all_gather_rows(ctx, dx_mine, dy_in.shape());
    Tensor dx_gate = nn::backward(gate, ctx, dlogits);
    d.add(dx, dx_gate.view(dx.shape()), dx);
    return dx;
  }

 private:
  // What this rank sends and receives for one routing (all derived from the replicated routing).
  struct Plan {
    std::vector<std::int64_t> send_choice;       // my tokens' accepted choices (t k + j), by destination, expert, slot
    std::vector<std::int64_t> send_token;        // their tokens
    std::vector<std::int64_t> send_local_token;  // their tokens - my first token
    std::vector<std::int64_t> send_rows, recv_rows;  // rows to / from each rank of the group
    std::vector<std::int64_t> group_order;   // received rows regrouped by my expert: row i of the group is received row group_order[i]
    std::vector<std::int64_t> ungroup_order; // and back: received row j is grouped row ungroup_order[j]
    std::vector<std::int64_t> expert_rows;   // rows of each of my experts
  };
  struct Pass {
    Routing routing;
    Plan plan;
  };

  template <class D>
  Routing route(const D& d, const Tensor& probs) {
    std::vector<double> p(static_cast<std::size_t>(probs.numel()));
    download_doubles(d, probs, p);
    last_ = Routing::make(p, probs.dim(0), opt_.experts, opt_.top_k, opt_.capacity_factor);
    return last_;
  }
  Plan plan(const Routing& r) const {
    Plan p;
    const std::int64_t n = part_.parts, per_rank = r.experts / n, slice = r.tokens / n, k = r.k;
    p.send_rows.assign(static_cast<std::size_t>(n), 0);
    p.recv_rows.assign(static_cast<std::size_t>(n), 0);
    p.expert_rows.assign(static_cast<std::size_t>(per_rank), 0);
    auto owner_of_token = [&](std::int64_t choice) { return choice / k / slice; };
    // received rows arrive by source rank, then by expert, then slot: number them that way
    std::vector<std::vector<std::int64_t>> recv_index(static_cast<std::size_t>(n));  // per source: (my expert, position)
    std::int64_t received = 0;
    std::vector<std::vector<std::int64_t>> rows_of_expert(static_cast<std::size_t>(per_rank));
    for (std::int64_t q = 0; q < n; ++q) {  // the choices of rank q's tokens, in dispatch order
      for (std::int64_t e = 0; e < r.experts; ++e)
        for (auto c : r.by_expert[static_cast<std::size_t>(e)]) {
          if (owner_of_token(c) != q) continue;
          const std::int64_t dest = e / per_rank;
          if (q == part_.index) {
            p.send_choice.push_back(c);
            p.send_token.push_back(c / k);
            p.send_local_token.push_back(c / k - q * slice);
            ++p.send_rows[static_cast<std::size_t>(dest)];
          }
          if (dest == part_.index) {
            ++p.recv_rows[static_cast<std::size_t>(q)];
            rows_of_expert[static_cast<std::size_t>(e - dest * per_rank)].push_back(received++);
          }
        }
    }
    for (std::int64_t e = 0; e < per_rank; ++e) {
      p.expert_rows[static_cast<std::size_t>(e)] = static_cast<std::int64_t>(rows_of_expert[static_cast<std::size_t>(e)].size());
      p.group_order.insert(p.group_order.end(), rows_of_expert[static_cast<std::size_t>(e)].begin(), rows_of_expert[static_cast<std::size_t>(e)].end());
    }
    p.ungroup_order.assign(p.group_order.size(), 0);
    for (std::size_t i = 0; i < p.group_order.size(); ++i) p.ungroup_order[static_cast<std::size_t>(p.group_order[i])] = static_cast<std::int64_t>(i);
    return p;
  }
  // rows [sum(send_rows), dim] sent by destination -> rows [sum(recv_rows), dim] received by source
  template <class Ctx>
  Tensor exchange(Ctx& ctx, const Tensor& rows, const std::vector<std::int64_t>& send_rows, const std::vector<std::int64_t>& recv_rows) const {
    const std::int64_t cols = rows.rank() > 1 ? rows.dim(1) : opt_.dim;
    std::int64_t total = 0;
    for (auto c : recv_rows) total += c;
    if (part_.whole()) return rows;
    Tensor out = ctx.empty({total, cols}, rows.dtype());
    std::vector<std::int64_t> sc, rc;
    for (auto c : send_rows) sc.push_back(c * cols);
    for (auto c : recv_rows) rc.push_back(c * cols);
    detail::tensor_group(ctx, "an expert-parallel MoE").all_to_all_v(rows, sc, out, rc);
    return out;
  }
  template <class Ctx>
  Tensor all_gather_rows(Ctx& ctx, const Tensor& mine, const Shape& whole) const {
    Tensor out = ctx.empty(whole, mine.dtype());
    all_gather_rows_into(ctx, mine, out);
    return out;
  }
  template <class Ctx>
  void all_gather_rows_into(Ctx& ctx, const Tensor& mine, const Tensor& out) const {
    if (part_.whole()) ctx.device().copy(mine, out.view(mine.shape()));
    else detail::tensor_group(ctx, "an expert-parallel MoE").all_gather(mine, out);
  }
  template <class Ctx>
  static Tensor index_tensor(Ctx& ctx, const std::vector<std::int64_t>& v) {
    Tensor t = ctx.empty({static_cast<std::int64_t>(v.size())}, DType::kI64);
    if (!v.empty()) ctx.device().upload(v.data(), t);
    return t;
  }
  template <class Ctx>
  static Tensor weight_tensor(Ctx& ctx, const Routing& r, const std::vector<std::int64_t>& choices, DType t) {
    std::vector<double> w;
    for (auto c : choices) w.push_back(r.weight[static_cast<std::size_t>(c)]);
    Tensor out = ctx.empty({static_cast<std::int64_t>(w.size())}, t);
    upload_doubles(ctx.device(), w, out);
    return out;
  }
  static std::vector<std::int64_t> iota(std::int64_t n) {
    std::vector<std::int64_t> v(static_cast<std::size_t>(n));
    std::iota(v.begin(), v.end(), 0);
    return v;
  }
  // expert e's weight matrix [rows, cols] as a view of a [experts, rows, cols] parameter tensor
  static Tensor expert(const Tensor& t, std::int64_t e, std::int64_t rows, std::int64_t cols) {
    return t.slice(e, e + 1).view({rows, cols});
  }
  static Tensor expert(const Parameter& p, std::int64_t e, std::int64_t rows, std::int64_t cols) { return expert(p.value, e, rows, cols); }
  template <class D>
  static void download_doubles(const D& d, const Tensor& t, std::vector<double>& out) {
    out.resize(static_cast<std::size_t>(t.numel()));
    if (t.numel() == 0) return;
    if (t.dtype() == DType::kF64) return d.download(t, out.data());
    EPL_CHECK(t.dtype() == DType::kF32, "MoE: f32 or f64 tensors, got ", name_of(t.dtype()));
    std::vector<float> f(out.size());
    d.download(t, f.data());
    std::copy(f.begin(), f.end(), out.begin());
  }
  template <class D>
  static void upload_doubles(const D& d, const std::vector<double>& v, const Tensor& t) {
    if (v.empty()) return;
    if (t.dtype() == DType::kF64) return d.upload(v.data(), t);
    std::vector<float> f(v.begin(), v.end());
    d.upload(f.data(), t);
  }

  Options opt_;
  SplitPart part_;
  Routing last_;
  std::int64_t dropped_ = 0, routed_ = 0;
};

}  // namespace nn
}  // namespace v0
}  // namespace epl
