#pragma once
/// \file
/// \brief The fields of aggregates — the only user of Boost.PFR in epl — and their names.
///
/// Debian 12's Boost.PFR (1.81) gives the fields but not their names, so field_name_v reads a
/// name the way Boost.PFR 1.84 does: a pointer to the field of a never-defined static object is a
/// template argument, and the compiler's text for the function it names (__PRETTY_FUNCTION__)
/// spells the member: `... = ptr<Lin>{(& fake<S>.holder<S>::value.S::qkv)}` (g++),
/// `... = {&fake.value.qkv}` (clang). Everything runs in consteval functions, so the object is
/// never used at run time and nothing needs its definition.
#include <boost/pfr.hpp>
#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

namespace epl {
inline namespace v0 {
namespace reflect {

/// \brief True for a class aggregate whose fields PFR can see (a user's layer struct).
template <class T>
inline constexpr bool is_reflectable_v = std::is_class_v<T> && std::is_aggregate_v<T>;

namespace detail {
// Converts to any type; declared only (used in unevaluated brace initialisations).
struct AnyField {
  template <class U>
  operator U() const noexcept;
};
// An aggregate of exactly one field. Boost.PFR 1.81 cannot count such a struct under nvcc (its
// check that the first field is no base class fails to compile there), so epl reads the one field
// through a structured binding on every compiler.
template <class T>
inline constexpr bool one_field_v = std::is_class_v<T> && std::is_aggregate_v<T> && !std::is_empty_v<T> &&
                                    requires { T{AnyField{}}; } && !requires { T{AnyField{}, AnyField{}}; };
// Boost.PFR counts the fields of an aggregate it cannot value-initialise (a member without a
// default constructor) by trying every count up to the struct's size in bits: a model of a few
// layers and one such member took minutes and 23 GB of the compiler's memory (a stranger's). epl
// refuses such a struct first, and PFR never sees it.
template <class T>
inline constexpr bool countable_v = std::is_default_constructible_v<T>;
template <class T>
constexpr void refuse_uncountable() {
  static_assert(countable_v<T>, "epl: this struct (a model or a layer struct: countable_v<T> names it) is not "
                "default-constructible, so epl cannot see its fields: each of its members needs a default constructor (a layer "
                "with only constructors that take arguments: add `Layer() = default;` to it); see docs/custom-layers.md");
}
}  // namespace detail

/// \brief The number of fields of aggregate T (which must be default-constructible).
template <class T>
inline constexpr std::size_t field_count_v = [] {
  if constexpr (detail::one_field_v<T>) return std::size_t{1};
  else if constexpr (!detail::countable_v<T>) return detail::refuse_uncountable<T>(), std::size_t{0};
  else return boost::pfr::tuple_size_v<T>;
}();

/// \brief Field I of aggregate t (a reference).
template <std::size_t I, class T>
constexpr auto& get(T& t) noexcept {
  if constexpr (detail::one_field_v<std::remove_const_t<T>>) {
    static_assert(I == 0);
    auto& [field] = t;
    return *std::addressof(field);  // the field of t (nvcc takes a plain `return field` for a local's)
  } else {
    static_assert(detail::countable_v<std::remove_const_t<T>>, "epl: see the error above (not default-constructible)");
    return boost::pfr::get<I>(t);
  }
}

/// \brief The type of field I of aggregate T.
template <std::size_t I, class T>
using field_t = std::remove_cvref_t<decltype(reflect::get<I>(std::declval<T&>()))>;

namespace detail {
template <class T>
struct FieldHolder {
  const T value;
};
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wundefined-var-template"
#pragma clang diagnostic ignored "-Wundefined-internal"
#endif
// Declared, never defined: only the addresses of its fields are taken, at compile time.
template <class T>
extern const FieldHolder<T> fake_object;

template <class F>
struct FieldPointer {
  const F* p;
};
template <auto Pointer>
consteval std::string_view signature() {
#if defined(__GNUC__) || defined(__clang__)
  return __PRETTY_FUNCTION__;
#else
  return {};  // no known spelling: field_name_v falls back to the index
#endif
}
// The member name at the end of the template argument's text: the identifier before the last
// '}' (and any ')'), after a '.' or ':'; empty when the text has no such shape.
consteval std::string_view member_name(std::string_view sig) {
  const auto close = sig.rfind('}');
  if (close == std::string_view::npos) return {};
  auto end = close;
  while (end > 0 && sig[end - 1] == ')') --end;
  auto begin = end;
  auto ident = [](char c) {  // ASCII letters, digits and _, and the bytes of a UTF-8 identifier (a field named λ)
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || static_cast<unsigned char>(c) >= 0x80;
  };
  while (begin > 0 && ident(sig[begin - 1])) --begin;
  if (begin == end || begin == 0 || (sig[begin - 1] != '.' && sig[begin - 1] != ':')) return {};
  if (sig[begin] >= '0' && sig[begin] <= '9') return {};
  return sig.substr(begin, end - begin);
}
template <class T, std::size_t I>
consteval std::string_view spelled_field_name() {
  using F = std::remove_cvref_t<decltype(reflect::get<I>(fake_object<T>.value))>;
  // std::addressof: nvcc's front end takes no built-in & of the reference pfr::get returns here
  return member_name(signature<FieldPointer<F>{std::addressof(reflect::get<I>(fake_object<T>.value))}>());
}
#if defined(__clang__)
#pragma clang diagnostic pop
#endif

// The decimal text of I.
template <std::size_t I>
consteval auto index_chars() {
  std::array<char, 21> s{};
  std::size_t n = 0, v = I;
  do {
    s[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0);
  for (std::size_t i = 0; i < n / 2; ++i) std::swap(s[i], s[n - 1 - i]);
  s[20] = static_cast<char>(n);
  return s;
}

template <class T, std::size_t I>
struct FieldName {
  static constexpr std::string_view spelled = spelled_field_name<T, I>();
  static constexpr auto digits = index_chars<I>();
  static constexpr std::size_t size = spelled.empty() ? static_cast<std::size_t>(digits[20]) : spelled.size();
  // the name copied out of the signature's text (which is never emitted), or the index
  static constexpr auto chars = [] {
    std::array<char, size + 1> s{};
    if (!spelled.empty()) std::copy_n(spelled.data(), spelled.size(), s.data());
    else std::copy_n(digits.data(), size, s.data());
    return s;
  }();
  static constexpr std::string_view value{chars.data(), size};
};
}  // namespace detail

/// \brief The decimal text of I ("0", "12"), made at compile time.
template <std::size_t I>
struct IndexText {
  static constexpr auto chars = detail::index_chars<I>();
  static constexpr std::string_view value{chars.data(), static_cast<std::size_t>(chars[20])};
};

/// \brief The declared name of field I of aggregate T ("qkv" for `Linear qkv;`), read at compile
/// time on g++, clang and nvcc; the index's text ("2") where the compiler's spelling is unknown.
template <class T, std::size_t I>
inline constexpr std::string_view field_name_v = detail::FieldName<T, I>::value;

/// \brief Calls fn(field, index) for each field of t in declaration order.
template <class T, class Fn>
void for_each_field(T& t, Fn&& fn) {
  if constexpr (detail::one_field_v<T>) fn(reflect::get<0>(t), std::integral_constant<std::size_t, 0>{});
  else if constexpr (!detail::countable_v<std::remove_const_t<T>>) detail::refuse_uncountable<std::remove_const_t<T>>();
  else boost::pfr::for_each_field(t, std::forward<Fn>(fn));
}

/// \brief Calls fn(field, index) for each field of t in reverse declaration order.
template <class T, class Fn>
void for_each_field_reverse(T& t, Fn&& fn) {
  constexpr std::size_t n = field_count_v<T>;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (fn(reflect::get<n - 1 - I>(t), std::integral_constant<std::size_t, n - 1 - I>{}), ...);
  }(std::make_index_sequence<n>{});
}

/// \brief Calls fn(field) for each field of a const aggregate (options structs read for
/// fingerprints and messages).
template <class T, class Fn>
void for_each_field_const(const T& t, Fn&& fn) {
  if constexpr (detail::one_field_v<T>) fn(reflect::get<0>(t));
  else if constexpr (!detail::countable_v<T>) detail::refuse_uncountable<T>();
  else boost::pfr::for_each_field(t, [&](const auto& field) { fn(field); });
}

/// \brief True when pred<field_t<I, T>> holds for every field.
template <class T, template <class> class Pred>
consteval bool all_fields() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return (Pred<field_t<I, T>>::value && ...);
  }(std::make_index_sequence<field_count_v<T>>{});
}

}  // namespace reflect
}  // namespace v0
}  // namespace epl
