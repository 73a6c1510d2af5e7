#pragma once
/// \file
/// \brief All built-in layers and combinators.
#include "epl/nn/activation.hpp"
#include "epl/nn/attention.hpp"
#include "epl/nn/recompute.hpp"
#include "epl/nn/combinators.hpp"
#include "epl/nn/embedding.hpp"
#include "epl/nn/linear.hpp"
#include "epl/nn/loss.hpp"
#include "epl/nn/moe.hpp"
#include "epl/nn/norm.hpp"
