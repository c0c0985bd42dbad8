#include "ddp/data/checksum64.h"

#include <xxhash.h>

#include <new>

namespace ddp {

void Checksum64::FreeState::operator()(XXH64_state_s* state) const { XXH64_freeState(state); }

Checksum64::Checksum64() : state_(XXH64_createState()) {
  if (!state_) throw std::bad_alloc();
  XXH64_reset(state_.get(), 0);
}

Checksum64::~Checksum64() = default;

void Checksum64::update(const void* data, std::size_t size) { XXH64_update(state_.get(), data, size); }

uint64_t Checksum64::digest() const { return XXH64_digest(state_.get()); }

uint64_t checksum64(std::string_view bytes) { return XXH64(bytes.data(), bytes.size(), 0); }

}  // namespace ddp
