import Foundation
import SystemPackage
import Testing
@testable import Sandbox

/// Each program of issue #7's table, run as a new user runs it: a granted
/// folder as the working directory, the shipped `writer` policy, nothing
/// else. Each failed before the policies grew and the sandbox got its own
/// /dev/shm and /proc.
@Suite struct RealProgramsTests {
    static func inVault(_ command: [String], _ scratch: Scratch, policy: Policy = .defaultPolicy) throws -> Outcome {
        let vault = scratch.path + "/vault"
        try FileManager.default.createDirectory(atPath: vault, withIntermediateDirectories: true)
        let fd = try ConfinementPlan.openVerified(vault)
        return try Run.confined(command, in: scratch, policy: policy) {
            $0.folders = [PathRule(grant: "VAULT", path: FilePath(vault), descriptor: fd, access: .readWrite)]
            $0.pathVariables = ["SANDBOX_GRANT_VAULT": FilePath(vault)]
            $0.workingDirectory = vault
        }
    }

    /// For `.enabled(if:)`: a test whose program is missing is reported as
    /// skipped; scripts/install-deps installs them all.
    static func available(_ program: String) -> Bool {
        FileManager.default.isExecutableFile(atPath: program)
    }

    @Test func tarExtractsFoldersWithTheirModes() throws {
        let scratch = Scratch()
        let source = scratch.path + "/source"
        try FileManager.default.createDirectory(atPath: source + "/a/b", withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: source + "/a/b/note.md", contents: Data("hi\n".utf8))
        chmod(source + "/a", 0o755)
        chmod(source + "/a/b", 0o750)
        #expect(try Run.unconfined(["/bin/tar", "-C", source, "-cf", scratch.path + "/vault.tar", "a"]).termination == .exited(0))
        try FileManager.default.createDirectory(atPath: scratch.path + "/vault", withIntermediateDirectories: true)
        try FileManager.default.moveItem(atPath: scratch.path + "/vault.tar", toPath: scratch.path + "/vault/archive.tar")
        let outcome = try Self.inVault(["/bin/sh", "-c", "tar xf archive.tar && stat -c '%a %n' a a/b && cat a/b/note.md"], scratch)
        #expect(outcome.stderr == "")
        #expect(outcome.output == ["755 a", "750 a/b", "hi"])
    }

    @Test func pythonMakesAVirtualEnvironment() throws {
        // A venv is links (bin/python, lib64): only where the policy lets the command make them.
        let outcome = try Self.inVault(["/bin/sh", "-c", "python3 -m venv venv && venv/bin/python -c 'import sys; print(sys.prefix != sys.base_prefix)' && venv/bin/python -m pip --version >/dev/null && echo pip"], Scratch(), policy: .withLinks)
        #expect(outcome.termination == .exited(0), "\(outcome.stderr)")
        #expect(outcome.output == ["True", "pip"])
    }

    @Test func pipWithoutNetworkFailsCleanly() throws {
        let outcome = try Self.inVault(["python3", "-m", "pip", "download", "--retries", "0", "six"], Scratch())
        #expect(outcome.termination != .exited(0))
        #expect(!outcome.stderr.contains("Traceback"), "\(outcome.stderr)")
        #expect(!outcome.stderr.contains("/etc/"), "\(outcome.stderr)")
        #expect(outcome.stderr.contains("No matching distribution") || outcome.stderr.contains("Could not find a version"), "\(outcome.stderr)")
    }

    @Test(.enabled(if: available("/usr/bin/node"), "node is not installed")) func nodeStarts() throws {
        let outcome = try Self.inVault(["node", "-e", "console.log(require('os').totalmem() > 0, require('crypto').createHash('sha256').update('x').digest('hex').length)"], Scratch())
        #expect(outcome.stderr == "")
        #expect(outcome.output == ["true 64"])
    }

    @Test func pythonMultiprocessingPoolComputes() throws {
        let outcome = try Self.inVault(["python3", "-c", "from multiprocessing import Pool\nwith Pool(2) as p: print(sum(p.map(abs, range(-100, 0))))"], Scratch())
        #expect(outcome.stderr == "")
        #expect(outcome.output == ["5050"])
    }

    @Test func bashLoginShellStartsQuietly() throws {
        let outcome = try Self.inVault(["bash", "-l", "-c", "echo ok"], Scratch())
        #expect(!outcome.stderr.contains("Permission denied"), "\(outcome.stderr)")
        #expect(outcome.output == ["ok"])
    }

    @Test(.enabled(if: available("/usr/bin/man"), "man is not installed")) func manFindsAPage() throws {
        guard try Run.unconfined(["/usr/bin/man", "-w", "ls"]).termination == .exited(0) else {
            print("skipped: this system has no manual page for ls (dpkg may exclude /usr/share/man)")
            return
        }
        let outcome = try Self.inVault(["man", "-w", "ls"], Scratch())
        #expect(outcome.stderr == "")
        #expect(outcome.output.first?.hasPrefix("/usr/share/man/") == true)
    }

    @Test func dfReadsTheMountTable() throws {
        let outcome = try Self.inVault(["df", "-P", "."], Scratch())
        #expect(outcome.stderr == "")
        #expect(outcome.termination == .exited(0))
        #expect(outcome.output.count == 2)
    }

    @Test(.enabled(if: available("/usr/bin/wget"), "wget is not installed")) func wgetWithoutNetworkFailsCleanly() throws {
        let outcome = try Self.inVault(["wget", "-q", "--tries=1", "http://127.0.0.1:9/"], Scratch())
        #expect(outcome.termination == .exited(4))  // wget's "network failure"
        #expect(!outcome.stderr.contains("wgetrc"), "\(outcome.stderr)")
    }

    @Test func aSwiftProgramSeesItsArguments() throws {
        let scratch = Scratch()
        let tools = scratch.path + "/tools"
        try FileManager.default.createDirectory(atPath: tools, withIntermediateDirectories: true)
        try "print(CommandLine.arguments.dropFirst().joined(separator: \",\"))\n".write(toFile: tools + "/args.swift", atomically: true, encoding: .utf8)
        let compiled = try Run.unconfined(["/bin/sh", "-c", "cd '\(tools)' && swiftc -static-stdlib -o args args.swift"])
        try #require(compiled.termination == .exited(0), "\(compiled.stderr)")
        // The writer policy plus the scratch tools folder, as /usr/local/bin would be.
        var policy = Policy.defaultPolicy
        policy.systemPaths.append(Policy.SystemPath(path: tools, access: .readExecute))
        let outcome = try Self.inVault([tools + "/args", "one", "two words"], scratch, policy: policy)
        #expect(outcome.stderr == "")
        #expect(outcome.output == ["one,two words"])
    }
}

/// What the private namespaces must not give away.
@Suite(.inBothViews) struct PrivateNamespaceTests {
    @Test func theSandboxSeesOnlyItsOwnProcesses() throws {
        let sleeper = Process()
        sleeper.executableURL = URL(fileURLWithPath: "/bin/sleep")
        sleeper.arguments = ["30.424242"]
        try sleeper.run()
        defer { kill(sleeper.processIdentifier, SIGKILL); sleeper.waitUntilExit() }
        let code = """
            import os
            pids = [p for p in os.listdir('/proc') if p.isdigit()]
            marker = '30.' + '424242'  # not literally in our own command line
            print('host sleeper', any(marker in open(f'/proc/{p}/cmdline').read() for p in pids))
            print('pid', os.getpid(), 'init', os.getppid())
            for probe in ['/proc/1/environ', '/proc/1/mem', '/proc/sysrq-trigger', '/proc/sys/kernel/hostname']:
                try:
                    open(probe, 'r+b' if 'sys' in probe else 'rb').read(1); print(probe, 'ok')
                except OSError as e: print(probe, 'refused')
            """
        let outcome = try Run.confinedPython(code, in: Scratch())
        #expect(outcome.stderr == "")
        // The keeper is pid 1, in an outer Landlock domain: its environment and memory stay closed.
        #expect(outcome.output == [
            "host sleeper False", "pid 2 init 1", "/proc/1/environ refused", "/proc/1/mem refused", "/proc/sysrq-trigger refused",
            "/proc/sys/kernel/hostname refused",
        ])
    }

    /// The supervisor (attribute reads, watches, changes) resolves paths in
    /// the command's namespace: a host pid or a host /dev/shm name answers
    /// exactly as a name that does not exist, directly or through a link.
    @Test(arguments: [nil, 65534] as [uid_t?]) func theSupervisorSeesTheCommandsProcAndSharedMemory(uid: uid_t?) throws {
        let sleeper = Process()
        sleeper.executableURL = URL(fileURLWithPath: "/bin/sleep")
        sleeper.arguments = ["30"]
        try sleeper.run()
        defer { kill(sleeper.processIdentifier, SIGKILL); sleeper.waitUntilExit() }
        let host = sleeper.processIdentifier
        // A name the host's /dev/shm surely has: one of its entries, else the folder itself.
        let hostShm = ((try? FileManager.default.contentsOfDirectory(atPath: "/dev/shm")) ?? []).first.map { "/dev/shm/" + $0 }
        let code = """
            import errno, os, sys
            def probe(path):
                try: os.getxattr(path, 'user.x'); return 'found'
                except OSError as e: return errno.errorcode[e.errno]
            os.chdir(os.environ['HOME'])
            os.symlink('/proc/\(host)', 'to-host'); os.symlink('/proc/999999', 'to-none')
            names = ['/proc/\(host)', '/proc/999999', 'to-host', 'to-none'] + sys.argv[1:]
            print(' '.join(probe(p) for p in names))
            """
        let home = Launcher.Home(owner: uid ?? getuid())
        let policy = home.path + "/links.plist"
        try Policy.writeWriterWithLinks(to: policy)
        let result = try Launcher.run([Run.python, "-c", code] + (hostShm.map { [$0, "/dev/shm/surely-not-there"] } ?? []), home: home, as: uid,
                                      options: ["--policy", policy])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.output == [Array(repeating: "ENOENT", count: hostShm == nil ? 4 : 6).joined(separator: " ")])
    }

    /// Root-only procfs files (the host's TCP Fast Open key and IPv6 stable
    /// secrets, the kernel's memory layout), found on this host: root reads
    /// them unconfined; a command launched by root reads nothing of them.
    @Test func rootOnlyProcFilesStayClosedToARootCommand() throws {
        try #require(geteuid() == 0, "run as root: an unprivileged command cannot read them anyway")
        var rootOnly: [String] = []
        func collect(_ folder: String, depth: Int) {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] where name.first.map({ !$0.isNumber }) ?? false {
                let path = folder + "/" + name
                var status = stat()
                guard lstat(path, &status) == 0 else { continue }
                if status.st_mode & S_IFMT == S_IFDIR, depth > 0, path.hasPrefix("/proc/sys") { collect(path, depth: depth - 1) }
                if status.st_mode & S_IFMT == S_IFREG, status.st_mode & S_IRUSR != 0, status.st_mode & S_IROTH == 0 { rootOnly.append(path) }
            }
        }
        collect("/proc", depth: 0)
        collect("/proc/sys", depth: 4)
        rootOnly = rootOnly.filter { !$0.hasPrefix("/proc/kmsg") }  // blocks until the kernel logs
        try #require(rootOnly.contains("/proc/slabinfo"), "\(rootOnly)")
        let code = """
            import sys
            total = 0
            for path in sys.argv[1:]:
                try:
                    with open(path, 'rb') as f: total += len(f.read(4096))
                except OSError: pass
            print('bytes', total)
            """
        let host = try Run.unconfined([Run.python, "-c", code] + rootOnly)
        #expect(host.stdout != "bytes 0\n", "the attack needs something to read")
        let confined = try Run.confined([Run.python, "-c", code] + rootOnly, in: Scratch())
        #expect(confined.stderr == "")
        #expect(confined.output == ["bytes 0"])
    }

    @Test func sharedMemoryIsPrivateAndBounded() throws {
        var host = stat()
        try #require(stat("/dev/shm", &host) == 0)
        let hostEntries = Set((try? FileManager.default.contentsOfDirectory(atPath: "/dev/shm")) ?? [])
        let code = """
            import os
            st = os.stat('/dev/shm')
            print('same device', st.st_dev == \(host.st_dev))
            print('entries', sorted(os.listdir('/dev/shm')))
            fd = os.open('/dev/shm/x', os.O_CREAT | os.O_RDWR, 0o600)
            try:
                os.ftruncate(fd, 1 << 30); os.posix_fallocate(fd, 0, 1 << 30); print('1 GiB ok')
            except OSError as e: print('1 GiB', e.errno)
            """
        let outcome = try Run.confinedPython(code, in: Scratch())
        #expect(outcome.stderr == "")
        #expect(outcome.output == ["same device False", "entries []", "1 GiB 28"])  // ENOSPC: 64 MiB at most
        // Nothing of the sandbox's reached the host's /dev/shm.
        #expect(Set((try? FileManager.default.contentsOfDirectory(atPath: "/dev/shm")) ?? []).subtracting(hostEntries).isEmpty)
    }

    @Test func theCommandCannotUndoTheMountsOrMakeNewOnes() throws {
        let code = """
            import ctypes, os
            libc = ctypes.CDLL(None, use_errno=True)
            def attempt(name, result):
                print(name, 'ok' if result == 0 else os.strerror(ctypes.get_errno()))
            attempt('umount /proc', libc.umount2(b'/proc', 2))
            attempt('umount /dev/shm', libc.umount2(b'/dev/shm', 2))
            attempt('mount tmpfs', libc.mount(b'x', b'/tmp', b'tmpfs', 0, None))
            attempt('unshare user', libc.unshare(0x10000000))
            attempt('setns', libc.setns(os.open('/proc/self/ns/mnt', os.O_RDONLY), 0))
            """
        let outcome = try Run.confinedPython(code, in: Scratch())
        #expect(outcome.output.count == 5)
        #expect(outcome.output.allSatisfy { !$0.hasSuffix(" ok") }, "\(outcome.output) \(outcome.stderr)")
        // An unprivileged launcher gets a user namespace too, in which the
        // command held every capability until it dropped them.
        let home = Launcher.Home(owner: 65534)
        let unprivileged = try Launcher.run(["/usr/bin/python3", "-c", code + "\nprint(set(l.split()[1] for l in open('/proc/self/status') if l.startswith('Cap')))"], home: home, as: 65534)
        #expect(unprivileged.output.prefix(5).allSatisfy { !$0.hasSuffix(" ok") }, "\(unprivileged.output) \(unprivileged.stderr)")
        #expect(unprivileged.output.count == 6)
        #expect(unprivileged.output.last == "{'0000000000000000'}")  // CapInh, CapPrm, CapEff, CapBnd, CapAmb all empty
    }

    @Test func withoutNamespacesTheCommandStillSeesNoHostProcess() throws {
        // The fallback (a kernel that refuses namespaces): no /proc at all.
        let outcome = try Run.confined(["/bin/sh", "-c", "ls /proc >/dev/null 2>&1 && echo listed || echo refused"], in: Scratch()) {
            $0.privateNamespaces = false
            $0.view = .host  // the private view is built in the namespaces
        }
        #expect(outcome.output == ["refused"])
    }
}
