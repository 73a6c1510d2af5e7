#pragma once
/// \file
/// \brief The CPU-clean umbrella header of epl: everything a host-only program needs. CUDA
/// lives in epl/device/cuda/*.cuh and is included only from CUDA translation units; MPI in
/// epl/comm/mpi/ (epl::mpi); the launcher in epl/runtime/launch.hpp.
#include "epl/checkpoint/export.hpp"
#include "epl/config/config.hpp"
#include "epl/core/dtype.hpp"
#include "epl/core/error.hpp"
#include "epl/core/memory.hpp"
#include "epl/core/random.hpp"
#include "epl/core/shape.hpp"
#include "epl/core/tensor.hpp"
#include "epl/core/timeline.hpp"
#include "epl/data/data.hpp"
#include "epl/device/cpu/cpu.hpp"
#include "epl/device/device.hpp"
#include "epl/nn/nn.hpp"
#include "epl/optim/adamw.hpp"
#include "epl/optim/sgd.hpp"
#include "epl/param/arena.hpp"
#include "epl/policy/policies.hpp"
#include "epl/runtime/context.hpp"
#include "epl/runtime/trainer.hpp"
#include "epl/strategy/partition.hpp"
#include "epl/strategy/pipeline.hpp"
#include "epl/strategy/replicate.hpp"
#include "epl/version.hpp"
