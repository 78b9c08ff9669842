// The bootstrap script of an instance that runs elsewhere (EC2 user data, a
// Slurm batch script): what it says, and what it does when a shell runs it.
#include "cloud/bootstrap.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "core/file_io.h"
#include "core/temp_dir.h"

namespace spot::cloud {
namespace {

TEST(BootstrapTest, ExportsEntersAndExecsQuotedCommand) {
  Result<std::string> s = RenderBootstrap({.job = "demo",
                                           .instance_id = "i-3",
                                           .argv = {"/usr/bin/spot", "worker", "it's"},
                                           .local_dir = "/scratch/i-3",
                                           .rendezvous_url = "tcp://10.0.0.1:29400",
                                           .comment = "SpotTrain instance i-3"});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s,
            "#!/bin/sh\n# SpotTrain instance i-3\nset -eu\n"
            "export SPOT_JOB='demo'\nexport SPOT_INSTANCE_ID='i-3'\n"
            "export SPOT_LOCAL_DIR='/scratch/i-3'\n"
            "export SPOT_RENDEZVOUS='tcp://10.0.0.1:29400'\n"
            "mkdir -p '/scratch/i-3'\ncd '/scratch/i-3'\n"
            "exec '/usr/bin/spot' 'worker' 'it'\\''s'\n");
  EXPECT_EQ(ShellQuote("a'b"), "'a'\\''b'");
}

TEST(BootstrapTest, RefusesWhatAShellCannotCarry) {
  const BootstrapSpec ok{.argv = {"/bin/true"}, .local_dir = "/d"};
  EXPECT_TRUE(RenderBootstrap(ok).ok());
  BootstrapSpec b = ok;
  b.argv.clear();
  EXPECT_EQ(RenderBootstrap(b).status().code(), StatusCode::kInvalidArgument);
  b = ok;
  b.local_dir.clear();
  EXPECT_EQ(RenderBootstrap(b).status().code(), StatusCode::kInvalidArgument);
  b = ok;
  b.argv = {std::string("a\0b", 3)};
  EXPECT_EQ(RenderBootstrap(b).status().code(), StatusCode::kInvalidArgument);
  b = ok;
  b.job = std::string("j\0b", 3);
  EXPECT_NE(RenderBootstrap(b).status().message().find("SPOT_JOB holds a NUL byte"),
            std::string::npos);
  b = ok;
  b.comment = "two\nlines";
  EXPECT_EQ(RenderBootstrap(b).status().code(), StatusCode::kInvalidArgument);
}

// Run by a real shell: the variables reach the program with their exact
// values (quotes, $, spaces), in the directory it made.
TEST(BootstrapTest, AShellRunsItAndTheProgramSeesTheJob) {
  TempDir dir = std::move(TempDir::Create("spot_boot")).value();
  const std::string out = (dir.path() / "env.txt").string();
  const std::string local = (dir.path() / "local disk" / "w-3").string();
  auto script = RenderBootstrap({.job = "job 'seven'",
                                 .instance_id = "w-3",
                                 .argv = {"/bin/sh", "-c", "env > \"$0\"; pwd >> \"$0\"", out},
                                 .local_dir = local,
                                 .rendezvous_url = "http://10.0.0.1:7000/rdzv?x=$HOME",
                                 .checkpoint_location = "s3://ckpts/job-7"});
  ASSERT_TRUE(script.ok()) << script.status().ToString();
  const std::string path = (dir.path() / "boot.sh").string();
  ASSERT_TRUE(WriteFileAtomically(path, *script).ok());
  ASSERT_EQ(std::system(("/bin/sh " + path).c_str()), 0) << *script;
  auto env = ReadFile(out);
  ASSERT_TRUE(env.ok());
  EXPECT_NE(env->find("SPOT_JOB=job 'seven'\n"), std::string::npos) << *env;
  EXPECT_NE(env->find("SPOT_INSTANCE_ID=w-3\n"), std::string::npos) << *env;
  EXPECT_NE(env->find("SPOT_RENDEZVOUS=http://10.0.0.1:7000/rdzv?x=$HOME\n"), std::string::npos)
      << *env;
  EXPECT_NE(env->find("SPOT_CHECKPOINT=s3://ckpts/job-7\n"), std::string::npos) << *env;
  EXPECT_NE(env->find("\n" + local + "\n"), std::string::npos) << *env;  // pwd
  EXPECT_TRUE(std::filesystem::is_directory(local));
  // A local directory that cannot be made stops the script before the exec.
  std::filesystem::create_directories(dir.path() / "ro");
  ASSERT_TRUE(WriteFileAtomically((dir.path() / "ro" / "file").string(), "x").ok());
  auto blocked = RenderBootstrap({.argv = {"/bin/sh", "-c", "touch \"$0\"", out + ".ran"},
                                  .local_dir = (dir.path() / "ro" / "file" / "sub").string()});
  ASSERT_TRUE(blocked.ok());
  ASSERT_TRUE(WriteFileAtomically(path, *blocked).ok());
  EXPECT_NE(std::system(("/bin/sh " + path + " 2>/dev/null").c_str()), 0);
  EXPECT_FALSE(std::filesystem::exists(out + ".ran"));
}

}  // namespace
}  // namespace spot::cloud
