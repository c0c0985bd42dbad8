#pragma once
// The master's name as the sockets need it. Under Slurm the master is the first node of the job,
// named as Slurm names it, and Slurm does not need its node names to resolve: `NodeName=sn1
// NodeAddr=10.1.0.7` is a layout its own configuration supports. c10d would then retry the name for
// the whole rendezvous time-out ("Name or service not known") before failing; this asks Slurm for
// the node's address instead, and fails in seconds, naming the fix, when nothing knows the name.

#include <functional>
#include <optional>
#include <string>

namespace ddp {

/// How names are looked up, as a seam for tests.
struct AddressLookup {
  /// 0 when `name` resolves, else getaddrinfo's error code (EAI_AGAIN is retried by the caller).
  std::function<int(const std::string& name)> resolve;
  /// The NodeAddr Slurm has for node `name` (`scontrol -o show node NAME`), if this is a Slurm job
  /// and Slurm knows the node.
  std::function<std::optional<std::string>(const std::string& name)> slurm_node_addr;
};

/// getaddrinfo, and scontrol (bounded to a few seconds) inside a Slurm job (SLURM_JOB_ID set).
AddressLookup system_address_lookup();

/// The address to use for the master.
struct MasterAddress {
  std::string address;  ///< `name` itself when it resolves, else Slurm's NodeAddr for it
  std::string note;     ///< empty, or one line saying where the address came from
};

/// `name` when it resolves; else, inside a Slurm job, the node's NodeAddr when that resolves;
/// else throws UserError naming `name`, the lookup's reason, and `fix` (how to give the address).
MasterAddress resolve_master_address(const std::string& name, const std::string& fix,
                                     const AddressLookup& lookup = system_address_lookup());

}  // namespace ddp
