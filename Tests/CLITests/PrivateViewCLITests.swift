import Foundation
import Testing

/// The private view (the default) as users and hostile commands meet it:
/// what exists, what a host process and the command can see of each other,
/// and the hard requirement with its two ways out. Each leak is shown in the
/// host view first, where it is still there.
@Suite struct PrivateViewCLITests {
    let home = CLI.Home()
    var vault: String { home.path + "/Vault" }
    var bookmark: String { home.path + "/vault.bookmark" }
    static let app = "com.example.view"

    init() throws {
        try FileManager.default.createDirectory(atPath: vault, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: home.path + "/salary.xlsx", contents: Data("1234567".utf8))
    }

    func run(_ options: [String], _ script: String) throws -> CLI.Result {
        try CLI.run(["run", "--app", Self.app] + options + ["--", "/bin/sh", "-c", script], home: home)
    }

    func container() throws -> String {
        try CLI.run(["container", "path", "--app", Self.app], home: home).stdout.trimmingCharacters(in: .newlines)
    }

    @Test func aHostFileOutsideDoesNotExistNotEvenForStat() throws {
        let script = "stat -c '%s %U' \(home.path)/salary.xlsx; ls \(home.path)"
        let host = try run(["--view", "host"], script)
        #expect(host.stdout.hasPrefix("7 "), "the leak the view closes: \(host.stderr)")
        let confined = try run([], script)
        #expect(confined.status != 0)
        #expect(confined.stdout.isEmpty)
        #expect(confined.stderr.contains("No such file or directory"), "\(confined.stderr)")
        // The grant and the container are there, at their host paths.
        #expect(try CLI.run(["pick", "--app", Self.app, "--select", vault, "-o", bookmark], home: home).status == 0)
        let granted = try run(["--grant", "VAULT=\(bookmark)"], "echo \"$SANDBOX_GRANT_VAULT\"; cd \(vault) && pwd -P && echo \"$HOME\"")
        #expect(granted.stdout == "\(vault)\n\(vault)\n\(try container())\n", "\(granted.stderr)")
    }

    /// An abstract name the command binds is its network namespace's, not
    /// the host's: a host program can still bind it. A pathname socket is
    /// connected only on the sandbox's own /tmp: a host program's socket in
    /// the container (or a grant) is out of reach.
    @Test func unixSocketsReachOnlyTheSandboxsOwn() throws {
        let name = "sandboxed-run-test-" + UUID().uuidString
        #expect(try run([], "true").status == 0)  // makes the container
        let folder = try container()
        let hostSocket = "agent.sock"  // relative: the container's path is longer than a socket's name may be
        // A host program listening in the container, as an agent might.
        let listener = Process()
        listener.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        listener.arguments = ["-c", "import socket, sys, time; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(); print('up', flush=True); sys.stdin.read()", hostSocket]
        listener.currentDirectoryURL = URL(fileURLWithPath: folder)
        let ready = Pipe(), hold = Pipe()
        listener.standardOutput = ready
        listener.standardInput = hold
        try listener.run()
        defer { try? hold.fileHandleForWriting.close(); listener.waitUntilExit() }
        var up = Data()
        while !up.contains(UInt8(ascii: "\n")) {
            let chunk = ready.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            up += chunk
        }
        #expect(up == Data("up\n".utf8))
        let code = """
            import errno, os, socket, sys
            os.chdir(os.environ["HOME"])
            def attempt(label, call):
                try: call(); print(label, "ok", flush=True)
                except OSError as e: print(label, errno.errorcode[e.errno], flush=True)
            held = socket.socket(socket.AF_UNIX)
            attempt("bind-abstract", lambda: held.bind("\\0" + sys.argv[1])); held.listen()
            attempt("connect-abstract", lambda: socket.socket(socket.AF_UNIX).connect("\\0" + sys.argv[1]))
            own = socket.socket(socket.AF_UNIX)
            attempt("bind-tmp", lambda: own.bind("/tmp/own.sock")); own.listen()
            attempt("connect-tmp", lambda: socket.socket(socket.AF_UNIX).connect("/tmp/own.sock"))
            attempt("connect-host-listener", lambda: socket.socket(socket.AF_UNIX).connect(sys.argv[2]))
            attempt("datagram", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
            sys.stdin.read()  # holds the abstract name until the host has tried it
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CLI.binary)
        process.arguments = ["run", "--app", Self.app, "--", "/usr/bin/python3", "-c", code, name, hostSocket]
        process.environment = home.environment
        let input = Pipe(), output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        var lines: [String] = []
        while lines.count < 6 {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            lines += String(decoding: chunk, as: UTF8.self).split(separator: "\n").map(String.init)
        }
        // The host binds the same abstract name while the command holds it.
        let host = try CLI.program("/usr/bin/python3", ["-c", "import socket, sys; socket.socket(socket.AF_UNIX).bind('\\0' + sys.argv[1]); print('free')", name])
        try input.fileHandleForWriting.close()
        process.waitUntilExit()
        #expect(lines == ["bind-abstract ok", "connect-abstract ok", "bind-tmp ok", "connect-tmp ok", "connect-host-listener EACCES", "datagram EACCES"])
        #expect(host.stdout == "free\n", "\(host.stderr)")
        // In the host view the command shares the host's network namespace: no AF_UNIX at all.
        let shared = try CLI.run(["run", "--app", Self.app, "--view", "host", "--", "/usr/bin/python3", "-c", "import socket; socket.socket(socket.AF_UNIX)"], home: home)
        #expect(shared.status == 1 && shared.stderr.contains("PermissionError"), "\(shared.stderr)")
    }

    @Test func ptysComeFromTheSandboxsOwnDevpts() throws {
        let code = "import os; m, s = os.openpty(); name = os.ttyname(s); print(name, os.path.exists(name), os.isatty(s))"
        let result = try CLI.run(["run", "--app", Self.app, "--", "/usr/bin/python3", "-c", code], home: home)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.hasPrefix("/dev/pts/") && result.stdout.hasSuffix(" True True\n"), "\(result.stdout)")
        // Its first pty is number 0: a devpts of its own, not the host's.
        let first = try CLI.run(["run", "--app", Self.app, "--", "/usr/bin/python3", "-c", code], home: home)
        #expect(first.stdout.hasPrefix("/dev/pts/0 "), "\(first.stdout)")
        #expect(try CLI.run(["run", "--app", Self.app, "--", "/bin/ls", "/dev/pts"], home: home).stdout == "ptmx\n")
    }

    /// A policy's read-write system path is writable whether stdout is a
    /// pipe or a file (read-only mounts depend on where stdout goes, and
    /// the view's binds must not).
    @Test(arguments: ["private", "host"]) func aSystemPathHasTheSameRightsWhateverStdoutIs(view: String) throws {
        let shared = home.path + "/shared"
        try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: true)
        let policy = home.path + "/policy.json"
        try """
            {"com.apple.security.app-sandbox": true,
             "org.sandboxed-run.system-paths.read-execute": ["/usr", "/lib", "/lib64", "/bin"],
             "org.sandboxed-run.system-paths.read-write": ["\(shared)", "\(home.path)/single.log", "/dev/null"]}
            """.write(toFile: policy, atomically: true, encoding: .utf8)
        _ = FileManager.default.createFile(atPath: home.path + "/single.log", contents: Data())
        let toPipe = try run(["--policy", policy, "--view", view], "echo piped > \(shared)/a && echo piped >> \(home.path)/single.log && echo ok")
        #expect(toPipe.stdout == "ok\n", "\(toPipe.stderr)")
        let file = home.path + "/out.txt"
        let toFile = try CLI.program("/bin/sh", ["-c", "'\(CLI.binary)' run --app \(Self.app) --policy \(policy) --view \(view) -- /bin/sh -c 'echo filed > \(shared)/b && echo filed >> \(home.path)/single.log && echo ok' > \(file)"],
                                     environment: home.environment)
        #expect(toFile.status == 0, "\(toFile.stderr)")
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "ok\n")
        #expect(try String(contentsOfFile: shared + "/a", encoding: .utf8) == "piped\n")
        #expect(try String(contentsOfFile: shared + "/b", encoding: .utf8) == "filed\n")
        #expect(try String(contentsOfFile: home.path + "/single.log", encoding: .utf8) == "piped\nfiled\n")
    }

    @Test func theLaunchersOwnAppendWorksInside() throws {
        #expect(try CLI.run(["pick", "--app", Self.app, "--select", vault, "-o", bookmark], home: home).status == 0)
        let result = try run(["--grant", "VAULT=\(bookmark)"], "\"$SANDBOXED_RUN\" append \"$SANDBOX_GRANT_VAULT/inbox.md\" 'from inside' && echo appended")
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "appended\n")
        #expect(try String(contentsOfFile: vault + "/inbox.md", encoding: .utf8) == "from inside\n")
    }

    @Test func theReportSaysWhichViewIsInForce() throws {
        let own = try run(["--report"], "true")
        #expect(own.stderr.contains("file-system view: private"), "\(own.stderr)")
        let host = try run(["--report", "--view", "host"], "true")
        #expect(host.stderr.contains("file-system view: host"), "\(host.stderr)")
        let bad = try run(["--view", "both"], "true")
        #expect(bad.status == 125 && bad.stderr.contains("--view both"), "\(bad.stderr)")
    }

    /// The view's memory-backed mounts are bounded: a command that fills
    /// them takes the host's memory (tmpfs's default is half of it), and
    /// its ptys come from the kernel's pty.max, shared with other sandboxes.
    @Test func theViewsOwnMountsAreBounded() throws {
        let code = """
            import errno, os
            for folder in ["/tmp", "/dev/shm"]:
                s = os.statvfs(folder); print(folder, s.f_blocks * s.f_frsize, s.f_files)
            held = []
            try:
                while len(held) < 1000: held.append(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
            except OSError as e: print("ptys", len(held), errno.errorcode[e.errno])
            """
        let result = try CLI.run(["run", "--app", Self.app, "--", "/usr/bin/python3", "-c", code], home: home)
        #expect(result.stdout == "/tmp \(512 << 20) 65536\n/dev/shm \(64 << 20) 65536\nptys 64 ENOSPC\n", "\(result.stderr)")
    }

    /// A folder handed in as stdin (or kept) leads by ".." to the host's
    /// tree around it: the private view refuses it, the host view takes it.
    @Test func aFolderDescriptorIsRefusedInThePrivateView() throws {
        let script = "'\(CLI.binary)' run --app \(Self.app) $0 -- /usr/bin/stat -c %s /proc/self/fd/0/salary.xlsx < '\(home.path)'"
        let refused = try CLI.program("/bin/sh", ["-c", script, ""], environment: home.environment)
        #expect(refused.status == 125, "\(refused.stderr)")
        #expect(refused.stderr.contains("outside its private view") && refused.stdout.isEmpty, "\(refused.stderr)")
        let host = try CLI.program("/bin/sh", ["-c", script, "--view=host"], environment: home.environment)
        #expect(host.stdout == "7\n", "the leak the refusal closes: \(host.stderr)")
    }

    static let canMount = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare")

    /// The sandbox has its own /dev/shm and /proc: a folder granted there
    /// would be hidden, and what the command wrote in its place lost with
    /// exit 0. Refused instead, in both views. (A scratch tmpfs on /dev/shm,
    /// in a mount namespace of the test's own.)
    @Test(.enabled(if: canMount, "needs root and unshare: a tmpfs on /dev/shm in a private mount namespace"), arguments: ["private", "host"])
    func aGrantInDevOrProcIsRefused(view: String) throws {
        let script = """
            mount -t tmpfs scratch /dev/shm && mkdir /dev/shm/G && echo host-data > /dev/shm/G/doc &&
            "$0" pick --app \(Self.app) --select /dev/shm/G -o "$1" >/dev/null &&
            "$0" run --app \(Self.app) --view \(view) --grant G="$1" -- /bin/sh -c 'echo app-saved > "$SANDBOX_GRANT_G/doc" && echo saved'
            echo "status $?"; cat /dev/shm/G/doc
            """
        let result = try CLI.program("/usr/bin/unshare", ["-m", "--propagation", "private", "/bin/sh", "-c", script, CLI.binary, bookmark],
                                     environment: home.environment)
        #expect(result.stdout == "status 125\nhost-data\n", "\(result.stderr)")
        #expect(result.stderr.contains("grant G: '/dev/shm/G' lies in /dev, where the sandbox has its own"), "\(result.stderr)")
    }

    /// procfs, sysfs and the like are the kernel's interfaces: as root (uid
    /// 0 without capabilities) file modes are the only check on many of
    /// their files. Never granted, directly or mounted beneath a folder,
    /// whether the folder was picked before the mount or after.
    @Test(.enabled(if: canMount, "needs root and unshare: a procfs mounted in a private mount namespace"))
    func aKernelInterfaceIsNeverGranted() throws {
        for folder in ["/proc/sys", "/sys", "/sys/fs/cgroup"] {
            let picked = try CLI.run(["pick", "--app", Self.app, "--select", folder, "-o", bookmark], home: home)
            #expect(picked.status == 125, "\(folder): \(picked.stderr)")
            #expect(picked.stderr.contains("is the kernel's"), "\(folder): \(picked.stderr)")
        }
        let chroot = home.path + "/chroot"
        try FileManager.default.createDirectory(atPath: chroot + "/proc", withIntermediateDirectories: true)
        let script = """
            "$0" pick --app \(Self.app) --select "$1" -o "$2" >/dev/null && mount -t proc proc "$1/proc" &&
            "$0" run --app \(Self.app) --grant C="$2" -- /bin/sh -c 'cat "$SANDBOX_GRANT_C/proc/1/cmdline" && echo read'
            echo "status $?"
            "$0" pick --app \(Self.app) --select "$1" -o "$2.again"; echo "pick $?"
            """
        let result = try CLI.program("/usr/bin/unshare", ["-m", "--propagation", "private", "/bin/sh", "-c", script, CLI.binary, chroot, bookmark],
                                     environment: home.environment)
        #expect(result.stdout == "status 125\npick 125\n", "\(result.stdout) \(result.stderr)")
        // At the launch (the folder was picked before the mount) and at a new pick.
        #expect(result.stderr.components(separatedBy: "\(chroot)/proc beneath it is the kernel's proc").count == 3, "\(result.stderr)")
    }

    /// The keeper (pid 1) is a fork of the launcher: its command line names
    /// host paths (bookmark files, a policy file). The view's /proc lists
    /// only what the command may ptrace, its own processes (nor the grant
    /// helper, pid 2 where the policy takes live grants).
    @Test func theKeeperIsNotListedInTheViewsProc() throws {
        let script = "echo $(ls /proc | grep -x '[0-9]*' | head -1) $$; cat /proc/1/cmdline >/dev/null 2>&1 && echo keeper-read || echo keeper-hidden"
        let host = try run(["--view", "host"], script)
        #expect(host.stdout.hasPrefix("1 ") && host.stdout.hasSuffix("\nkeeper-read\n"), "the leak in the host view: \(host.stderr)")
        let own = try run([], script)
        let first = own.stdout.split(separator: "\n").first?.split(separator: " ") ?? []
        // The first process listed is the command's shell itself.
        #expect(first.count == 2 && first[0] == first[1] && own.stdout.hasSuffix("\nkeeper-hidden\n"), "\(own.stdout) \(own.stderr)")
    }

    // MARK: The hard requirement

    /// Installs a seccomp filter that refuses new user namespaces (as a
    /// distribution that restricts them does), then runs the CLI as
    /// uid 65534, who needs one for the view's mounts.
    static let refusingUserNamespaces = """
        import ctypes, os, struct, sys
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        def op(code, jt, jf, k): return struct.pack("HBBI", code, jt, jf, k)
        LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
        ALLOW, EPERM, ENOSYS = 0x7fff0000, 0x00050000 | 1, 0x00050000 | 38
        program = b"".join([
            op(LD, 0, 0, 4), op(JEQ, 1, 0, 0xc000003e), op(RET, 0, 0, ALLOW),
            op(LD, 0, 0, 0),
            op(JEQ, 0, 1, 435), op(RET, 0, 0, ENOSYS),                    # clone3: glibc falls back to clone
            op(JEQ, 2, 0, 56), op(JEQ, 1, 0, 272), op(RET, 0, 0, ALLOW),  # clone, unshare
            op(LD, 0, 0, 16), op(JSET, 0, 1, 0x10000000), op(RET, 0, 0, EPERM), op(RET, 0, 0, ALLOW),
        ])
        buffer = ctypes.create_string_buffer(program)
        class Prog(ctypes.Structure): _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
        prog = Prog(len(program) // 8, ctypes.addressof(buffer))
        assert libc.prctl(38, 1, 0, 0, 0) == 0                            # no new privileges
        assert libc.prctl(22, 2, ctypes.addressof(prog), 0, 0) == 0, ctypes.get_errno()
        os.execv("/usr/bin/setpriv", ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + sys.argv[1:])
        """

    static let canRefuse = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")
        && (try? CLI.program("/usr/bin/uname", ["-m"]).stdout) == "x86_64\n"

    @Test(.enabled(if: canRefuse, "needs root (to become uid 65534), setpriv and x86-64 (the filter's syscall numbers)"))
    func whereTheViewCannotBeBuiltTheLaunchStopsUnlessAskedOtherwise() throws {
        #expect(try CLI.program("/bin/chown", ["-R", "65534:65534", home.path]).status == 0)
        func launch(_ options: [String]) throws -> CLI.Result {
            try CLI.program("/usr/bin/python3", ["-c", Self.refusingUserNamespaces, CLI.binary, "run", "--app", Self.app] + options
                            + ["--", "/bin/sh", "-c", "stat -c %s \(home.path)/salary.xlsx; echo ran"], environment: home.environment)
        }
        let stopped = try launch([])
        #expect(stopped.status == 125, "\(stopped.stderr)")
        #expect(!stopped.stdout.contains("ran"))
        #expect(stopped.stderr.contains("private view"), "\(stopped.stderr)")
        #expect(stopped.stderr.contains("--view host") && stopped.stderr.contains("--best-effort"), "\(stopped.stderr)")
        let fallback = try launch(["--best-effort"])
        #expect(fallback.status == 0, "\(fallback.stderr)")
        #expect(fallback.stdout == "7\nran\n")
        #expect(fallback.stderr.components(separatedBy: "running in the host view").count == 2, "one notice: \(fallback.stderr)")
        let host = try launch(["--view", "host"])
        #expect(host.status == 0 && host.stdout == "7\nran\n", "\(host.stderr)")
        #expect(!host.stderr.contains("private view"))
    }
}
