#include "cloud/provider_registry.h"

#include "cloud/local_provider.h"

namespace spot::cloud {

void RegisterBuiltinProviders(ProviderRegistry& r) {
  Status s = r.Register(
      "local",
      "instances are `spot worker` processes on this machine, reclaimed by the replayed market "
      "with notice, SIGKILL and the loss of their local disk",
      [](const ProviderContext& c) -> std::unique_ptr<Provider> {
        return std::make_unique<LocalProvider>(
            LocalProviderOptions{.zones = c.zones,
                                 .start_tick = c.start_tick,
                                 .notice_s = c.notice_s,
                                 .wall_epoch_unix_s = c.wall_epoch_unix_s,
                                 .time_compression = c.time_compression,
                                 .instances_dir = c.instances_dir,
                                 .terminate_grace_wall_s = c.terminate_grace_wall_s,
                                 .command = c.command,
                                 .metadata_flavor = c.metadata_flavor,
                                 .clock = c.clock});
      });
  (void)s;  // builtin names are distinct; a clash is a programmer bug caught by tests
}

}  // namespace spot::cloud
