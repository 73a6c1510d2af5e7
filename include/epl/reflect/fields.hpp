#pragma once
/// \file
/// \brief The fields of aggregates — the only user of Boost.PFR in epl.
#include <boost/pfr.hpp>
#include <cstddef>
#include <type_traits>
#include <utility>

namespace epl {
inline namespace v0 {
namespace reflect {

/// \brief True for a class aggregate whose fields PFR can see (a user's layer struct).
template <class T>
inline constexpr bool is_reflectable_v = std::is_class_v<T> && std::is_aggregate_v<T>;

/// \brief The number of fields of aggregate T.
template <class T>
inline constexpr std::size_t field_count_v = boost::pfr::tuple_size_v<T>;

/// \brief The type of field I of aggregate T.
template <std::size_t I, class T>
using field_t = boost::pfr::tuple_element_t<I, T>;

/// \brief Calls fn(field, index) for each field of t in declaration order.
template <class T, class Fn>
void for_each_field(T& t, Fn&& fn) {
  boost::pfr::for_each_field(t, std::forward<Fn>(fn));
}

/// \brief Calls fn(field, index) for each field of t in reverse declaration order.
template <class T, class Fn>
void for_each_field_reverse(T& t, Fn&& fn) {
  constexpr std::size_t n = field_count_v<T>;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (fn(boost::pfr::get<n - 1 - I>(t), std::integral_constant<std::size_t, n - 1 - I>{}), ...);
  }(std::make_index_sequence<n>{});
}

/// \brief Calls fn(field) for each field of a const aggregate (options structs read for
/// fingerprints and messages).
template <class T, class Fn>
void for_each_field_const(const T& t, Fn&& fn) {
  boost::pfr::for_each_field(t, [&](const auto& field) { fn(field); });
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
