#include "cloud/provider_registry.h"

#include "cloud/ec2_provider.h"
#include "cloud/local_provider.h"
#include "cloud/slurm_provider.h"

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
  s = r.RegisterWithOptionsOrError<Ec2ProviderOptions>(
      "ec2",
      "instances are EC2 instances (spot or on-demand) launched through the EC2 API; each "
      "boots the image and runs the worker from its user data",
      [](const Ec2ProviderOptions& o, const ProviderContext& c) { return MakeEc2Provider(o, c); });
  (void)s;
  s = r.RegisterWithOptionsOrError<SlurmProviderOptions>(
      "slurm",
      "instances are Slurm jobs (sbatch) in a partition of an on-premises cluster; a "
      "preemption by a higher-priority partition or QOS is the notice (SIGTERM, then GraceTime)",
      [](const SlurmProviderOptions& o, const ProviderContext& c) {
        return MakeSlurmProvider(o, c);
      });
  (void)s;
}

}  // namespace spot::cloud
