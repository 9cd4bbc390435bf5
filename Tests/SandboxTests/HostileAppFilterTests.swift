import Foundation
import Testing
import SystemPackage
@testable import Sandbox
import CSyscalls

/// A host process for the scheduling attacks: /bin/sleep in a session of its
/// own (so that its process group is its alone), optionally as another uid.
final class Sleeper {
    let process = Process()
    let pid: pid_t

    init(uid: uid_t? = nil) throws {
        process.executableURL = URL(fileURLWithPath: Run.python)
        let become = uid.map { "os.setgroups([]); os.setresgid(\($0), \($0), \($0)); os.setresuid(\($0), \($0), \($0))\n" } ?? ""
        // A process group of its own either way (Foundation may have made one already).
        let script = "import os\nif os.getpgrp() != os.getpid(): os.setsid()\n" + become
            + "print(os.getpid(), flush=True)\nos.execv('/bin/sleep', ['sleep', '60'])"
        process.arguments = ["-c", script]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line += chunk
        }
        // Never -1 or 0: kill() would then signal every process we may signal.
        let started = pid_t(String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        pid = started == process.processIdentifier && started > 0 ? started : process.processIdentifier
        try #require(started == process.processIdentifier, "the sleeper did not start: \(line)")
        // Wait for the exec, so that what we read below is /bin/sleep's.
        for _ in 0..<200 where (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8)) != "sleep\n" { usleep(5000) }
    }

    deinit {
        if pid > 0 { kill(pid, SIGKILL) }
        process.waitUntilExit()
    }

    /// Nice value, scheduling policy and allowed CPUs, from /proc.
    var scheduling: String {
        let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
        let fields = stat[(stat.lastIndex(of: ")").map { stat.index($0, offsetBy: 2) } ?? stat.startIndex)...].split(separator: " ")
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        let cpus = status.split(separator: "\n").first { $0.hasPrefix("Cpus_allowed_list:") }?.split(separator: "\t").last ?? "?"
        // stat fields 19 (nice) and 41 (policy), counted from 1 with state as field 3.
        return "nice \(fields.count > 38 ? fields[16] : "?") policy \(fields.count > 38 ? fields[38] : "?") cpus \(cpus)"
    }
}

/// The filter against a hostile app: ioctls, set-user-ID files, other
/// processes' scheduling, extended attributes outside, syscalls newer than
/// libseccomp. Each attack is shown to work unconfined.
@Suite(.inBothViews) struct HostileAppFilterTests {
    /// argv[-3]: a same-uid sleeper alone in its session; argv[-2], argv[-1]: another uid's sleeper and that uid.
    static let schedulingAttacks = Attack.prelude + """
        pid, other_pid, other_uid = int(sys.argv[-3]), int(sys.argv[-2]), int(sys.argv[-1])
        libc.syscall.restype = ctypes.c_long
        attempt("own-setpriority", lambda: os.setpriority(os.PRIO_PROCESS, 0, 1))
        attempt("own-setaffinity", lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))
        attempt("own-setscheduler", lambda: os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0)))
        report("own-setpriority-high-bits", libc.syscall(141, 1 << 32, 1 << 32, 2))  # the kernel reads (0, 0)
        attempt("other-setpriority", lambda: os.setpriority(os.PRIO_PROCESS, pid, 7))
        attempt("other-setpriority-pgrp", lambda: os.setpriority(os.PRIO_PGRP, pid, 7))
        attempt("other-setpriority-user", lambda: os.setpriority(os.PRIO_USER, other_uid, 7))
        attempt("other-setaffinity", lambda: os.sched_setaffinity(pid, {0}))
        attempt("other-setscheduler", lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0)))
        attempt("other-setparam", lambda: os.sched_setparam(pid, os.sched_param(0)))
        attr = (ctypes.c_uint32 * 12)(48, 0, 0, 0, 9)  # size, SCHED_OTHER, flags (2 words), nice 9
        report("other-setattr", libc.syscall(314, pid, attr, 0))
        report("other-setpriority-high-bits", libc.syscall(141, 0, (1 << 32) | pid, 7))
        """

    static let schedulingRefused = [
        "own-setpriority ok", "own-setaffinity ok", "own-setscheduler ok", "own-setpriority-high-bits ok",
        "other-setpriority EPERM", "other-setpriority-pgrp EPERM", "other-setpriority-user EPERM", "other-setaffinity EPERM",
        "other-setscheduler EPERM", "other-setparam EPERM", "other-setattr EPERM", "other-setpriority-high-bits EPERM",
    ]

    @Test func otherProcessesSchedulingCannotChange() throws {
        let unaffected = "nice 0 policy 0 cpus \(try Sleeper().scheduling.split(separator: " ").last!)"
        // Unconfined, as root: every call reaches the sleepers.
        do {
            let sleeper = try Sleeper()
            let other = try Sleeper(uid: 4242)
            let outcome = try Run.unconfined([Run.python, "-c", Self.schedulingAttacks, String(sleeper.pid), String(other.pid), "4242"])
            #expect(outcome.output.filter { $0.hasPrefix("other-") && !$0.hasSuffix(" ok") }.isEmpty, "\(outcome.output)")
            #expect(sleeper.scheduling != unaffected)
            #expect(other.scheduling.hasPrefix("nice 7 "))
        }
        let sleeper = try Sleeper()
        let other = try Sleeper(uid: 4242)
        let confined = try Run.confined([Run.python, "-c", Self.schedulingAttacks, String(sleeper.pid), String(other.pid), "4242"], in: Scratch())
        #expect(confined.output == Self.schedulingRefused, "\(confined.stderr)")
        #expect(sleeper.scheduling == unaffected)
        #expect(other.scheduling == unaffected)
    }

    // MARK: ioctl

    @Test func aFoldersGenerationCannotChangeThroughAReadOnlyGrant() throws {
        // FS_IOC_SETVERSION on a folder opened read-only changes its generation
        // and so its file handle: another app's bookmark would then resolve the
        // folder as replaced.
        let scratch = Scratch()
        let folder = scratch.path + "/Photos"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
        let code = Attack.prelude + """
            import fcntl, struct
            class Handle(ctypes.Structure):
                _fields_ = [("size", ctypes.c_uint), ("type", ctypes.c_int), ("data", ctypes.c_ubyte * 128)]
            def handle():
                h = Handle(); h.size = 128; mount = ctypes.c_int()
                if libc.name_to_handle_at(-100, sys.argv[1].encode(), ctypes.byref(h), ctypes.byref(mount), 0) != 0:
                    return None
                return bytes(h.data[:h.size])
            before = handle()
            fd = os.open(sys.argv[1], os.O_RDONLY)
            version = struct.unpack("l", fcntl.ioctl(fd, 0x80087601, bytes(8)))[0]  # FS_IOC_GETVERSION: reading is fine
            attempt("FS_IOC_SETVERSION", lambda: fcntl.ioctl(fd, 0x40087602, struct.pack("l", version + 1)))
            attempt("FS_IOC_SETFLAGS", lambda: fcntl.ioctl(fd, 0x40086602, struct.pack("l", 0x10)))
            attempt("FS_IOC_FSSETXATTR", lambda: fcntl.ioctl(fd, 0x401C5820, bytes(28)))
            attempt("unknown", lambda: fcntl.ioctl(fd, 0x1234, bytes(8)))
            print("version", struct.unpack("l", fcntl.ioctl(fd, 0x80087601, bytes(8)))[0] == version)
            if before is not None: print("handle", handle() == before)
            """
        let unconfined = try Run.unconfined([Run.python, "-c", code, folder])
        #expect(unconfined.output == ["FS_IOC_SETVERSION ok", "FS_IOC_SETFLAGS ok", "FS_IOC_FSSETXATTR ok", "unknown ENOTTY", "version False", "handle False"])
        let grant = try ConfinementPlan.openVerified(folder)
        let confined = try Run.confined([Run.python, "-c", code, folder], in: scratch) {
            $0.folders = [PathRule(grant: "PHOTOS", path: FilePath(folder), descriptor: grant, access: .readOnly)]
        }
        // name_to_handle_at is refused in the sandbox, so no "handle" line there.
        #expect(confined.output == ["FS_IOC_SETVERSION EPERM", "FS_IOC_SETFLAGS EPERM", "FS_IOC_FSSETXATTR EPERM", "unknown ENOTTY", "version True"])
        #expect(try Run.unconfined(["/usr/bin/lsattr", "-d", folder]).stdout.hasPrefix("----"))
    }

    @Test func terminalsWorkButCannotBeTakenOver() throws {
        var master: Int32 = -1
        var slave: Int32 = -1
        try #require(csb_open_pty(&master, &slave) == 0)
        defer { close(master); close(slave) }
        let code = Attack.prelude + """
            import fcntl, termios, struct, tty
            attempt("TCGETS", lambda: termios.tcgetattr(0))
            attempt("TCSETS", lambda: termios.tcsetattr(0, termios.TCSANOW, termios.tcgetattr(0)))
            attempt("raw-mode", lambda: tty.setraw(0))
            attempt("TIOCSWINSZ", lambda: fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0)))
            print("size", os.get_terminal_size(0))
            attempt("TCFLSH", lambda: termios.tcflush(0, termios.TCIFLUSH))
            attempt("FIONREAD", lambda: fcntl.ioctl(0, termios.FIONREAD, bytes(4)))
            attempt("TIOCSTI", lambda: fcntl.ioctl(0, termios.TIOCSTI, b"x"))
            attempt("TIOCCONS", lambda: fcntl.ioctl(0, termios.TIOCCONS))
            attempt("TIOCSETD", lambda: fcntl.ioctl(0, termios.TIOCSETD, struct.pack("i", 0)))
            attempt("TIOCSCTTY", lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
            attempt("TIOCEXCL", lambda: fcntl.ioctl(0, termios.TIOCEXCL))
            """
        let confined = try Run.confinedPython(code, in: Scratch()) {
            $0.standardInput = slave
        }
        #expect(confined.output == [
            "TCGETS ok", "TCSETS ok", "raw-mode ok", "TIOCSWINSZ ok", "size os.terminal_size(columns=100, lines=40)", "TCFLSH ok",
            // TIOCSCTTY: the relay's pty is the command's controlling terminal
            // already (script and tmux make their own ptys theirs with it).
            "FIONREAD ok", "TIOCSTI EPERM", "TIOCCONS EPERM", "TIOCSETD EPERM", "TIOCSCTTY ok", "TIOCEXCL ENOTTY",
        ], "\(confined.stderr)")
    }

    @Test func realToolsWorkOnATerminal() throws {
        // less, vi and an interactive shell on a real pty: the ioctls they
        // issue (measured with strace) are all allowed.
        var master: Int32 = -1
        var slave: Int32 = -1
        try #require(csb_open_pty(&master, &slave) == 0)
        // Drain the terminal so that the tools never block writing to it.
        // `master` is closed only once the thread has stopped reading it:
        // closed under it, its number could go to another test's file (all
        // tests share this process), which the thread would then read from.
        let terminal = master
        let stopped = DispatchSemaphore(value: 0)
        let drain = Thread {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while read(terminal, &buffer, 4096) > 0 {}
            stopped.signal()
        }
        drain.start()
        defer {
            close(slave)  // the last copy of the terminal: the thread's read ends (EIO)
            if stopped.wait(timeout: .now() + 30) == .success {
                close(master)
            } else {
                Issue.record("the drain thread still reads the terminal: its master is left open rather than closed under it")
            }
        }
        let script = """
            set -e
            exec 3<&0  # the terminal, for the tools' output
            cd Documents
            printf 'one\\ntwo\\n' > notes.txt
            less -F notes.txt >&3
            vi -u NONE -c '%s/one/ONE/' -c 'wq' notes.txt >&3
            echo 'echo $((6*7)) > answer.txt; exit' | bash -i >&3 2>&3
            stty size > size.txt
            cat notes.txt answer.txt
            """
        let outcome = try Run.confined(["/bin/sh", "-c", script], in: Scratch()) {
            $0.standardInput = slave
            $0.environment = ["TERM": "xterm"]
        }
        #expect(outcome.termination == .exited(0), "\(outcome.stderr)")
        #expect(outcome.output == ["ONE", "two", "42"])
    }

    @Test func reflinkCopiesAndDescriptorIoctlsWork() throws {
        let code = Attack.prelude + """
            import fcntl, termios, subprocess
            open("Documents/a", "w").write("data")
            src = os.open("Documents/a", os.O_RDONLY); dst = os.open("Documents/b", os.O_WRONLY | os.O_CREAT, 0o644)
            # FICLONE reaches the file system: ext4 answers EOPNOTSUPP, alias ENOTSUP (btrfs and xfs clone).
            attempt("FICLONE", lambda: fcntl.ioctl(dst, 0x40049409, src))
            attempt("FIOCLEX", lambda: fcntl.ioctl(src, termios.FIOCLEX))
            attempt("FIONCLEX", lambda: fcntl.ioctl(src, termios.FIONCLEX))
            attempt("FIGETBSZ", lambda: fcntl.ioctl(src, 2, bytes(4)))
            attempt("FS_IOC_GETFLAGS", lambda: fcntl.ioctl(src, 0x80086601, bytes(8)))
            r, w = os.pipe()
            attempt("FIONBIO", lambda: fcntl.ioctl(r, termios.FIONBIO, b"\\x01\\x00\\x00\\x00"))
            print(subprocess.run(["cp", "--reflink=auto", "-a", "Documents/a", "Documents/c"]).returncode, open("Documents/c").read())
            """
        let confined = try Run.confinedPython(code, in: Scratch())
        #expect(confined.output == ["FICLONE ENOTSUP", "FIOCLEX ok", "FIONCLEX ok", "FIGETBSZ ok", "FS_IOC_GETFLAGS ok", "FIONBIO ok", "0 data"], "\(confined.stderr)")
    }

    @Test func interfaceQueriesOnlyWithANetworkEntitlement() throws {
        // Any socket answers SIOCGIFCONF, an AF_UNIX pair too: it lists the
        // host's interfaces and addresses.
        let code = Attack.prelude + """
            import fcntl, socket, struct
            a, b = socket.socketpair()
            buffer = bytes(40 * 16)
            def query():
                raw = fcntl.ioctl(a.fileno(), 0x8912, struct.pack("iL", len(buffer), 0))  # SIOCGIFCONF, length only
                assert struct.unpack("i", raw[:4])[0] > 0
            attempt("SIOCGIFCONF", query)
            attempt("SIOCGIFINDEX", lambda: fcntl.ioctl(a.fileno(), 0x8933, struct.pack("16si", b"lo", 0)))
            """
        #expect(try Run.unconfinedPython(code).output == ["SIOCGIFCONF ok", "SIOCGIFINDEX ok"])
        #expect(try Run.confinedPython(code, in: Scratch()).output == ["SIOCGIFCONF ENOTTY", "SIOCGIFINDEX ENOTTY"])
        let networked = try #require(Policy.builtin(named: "networked"))
        #expect(try Run.confinedPython(code, in: Scratch(), policy: networked).output == ["SIOCGIFCONF ok", "SIOCGIFINDEX ok"])
    }

    /// What browsers record on a download: where it came from.
    static func setOrigin(of file: String) throws {
        let set = try Run.unconfinedPython("import os; os.setxattr('\(file)', 'user.xdg.origin.url', b'https://example.com/x')")
        try #require(set.termination == .exited(0))
    }

    // MARK: Syscalls newer than libseccomp

    @Test func syscallsLibseccompDoesNotKnowAreNotImplemented() throws {
        // getxattrat and listxattrat (Linux 6.13) read attributes by path with
        // no supervisor to ask; setxattrat, removexattrat, file_getattr and
        // file_setattr change them. libseccomp 2.5.4 knows none of them, so the
        // default answers: ENOSYS.
        let code = Attack.prelude + """
            libc.syscall.restype = ctypes.c_long
            path = sys.argv[1].encode()
            value = ctypes.create_string_buffer(64)
            args = (ctypes.c_uint64 * 2)(ctypes.addressof(value), 64)  # struct xattr_args: value, size, flags
            length = libc.syscall(464, -100, path, 0, b"user.xdg.origin.url", args, 16)
            report("getxattrat", length)
            if length > 0: print(value.raw[:length].decode())
            names = ctypes.create_string_buffer(256)
            report("listxattrat", libc.syscall(465, -100, path, 0, names, 256))
            report("setxattrat", libc.syscall(463, -100, path, 0, b"user.x", args, 16))
            report("removexattrat", libc.syscall(466, -100, path, 0, b"user.x"))
            attr = ctypes.create_string_buffer(64)
            report("file_getattr", libc.syscall(468, -100, path, attr, 24, 0))
            report("file_setattr", libc.syscall(469, -100, path, attr, 24, 0))
            """
        let scratch = Scratch()
        let file = scratch.file("download.zip")
        try Self.setOrigin(of: file)
        let unconfined = try Run.unconfined([Run.python, "-c", code, file])
        #expect(unconfined.output.prefix(3) == ["getxattrat ok", "https://example.com/x", "listxattrat ok"])
        let confined = try Run.confined([Run.python, "-c", code, file], in: scratch)
        #expect(confined.output == [
            "getxattrat ENOSYS", "listxattrat ENOSYS", "setxattrat ENOSYS", "removexattrat ENOSYS", "file_getattr ENOSYS",
            "file_setattr ENOSYS",
        ])
    }
}

/// A lease on a file the command may only read would stall every host
/// process that opens it for writing, up to lease-break-time (45 s).
@Suite(.inBothViews) struct LeaseTests {
    @Test func leasesAreRefused() throws {
        let scratch = Scratch()
        let code = Attack.prelude + """
            import fcntl
            fd = os.open(sys.argv[1], os.O_RDONLY)
            attempt("lease", lambda: fcntl.fcntl(fd, 1024, fcntl.F_RDLCK))
            """
        let file = scratch.file("shared.txt")
        // Unconfined, the owner of a file takes a read lease on it.
        #expect(try Run.unconfined([Run.python, "-c", code, file]).output == ["lease ok"])
        // Confined, on the same scratch file, which the policy lets it only read
        // (it owns the file, so without the guard the lease would be granted).
        var policy = Policy.defaultPolicy
        policy.systemPaths.append(.init(path: file, access: .readOnly))
        let confined = try Run.confined([Run.python, "-c", code, file], in: scratch, policy: policy)
        #expect(confined.output == ["lease EPERM"], "\(confined.stderr)")
    }
}
