import Foundation
import Testing
@testable import Sandbox
import CSyscalls

/// The assembler that builds the argument guard: labels become the 8-bit
/// forward offsets of classic BPF, and what the kernel would reject or
/// misread is refused when the program is built.
@Suite struct ClassicBPFTests {
    typealias Instruction = ClassicBPF.Instruction

    @Test func labelsBecomeForwardOffsetsAndNilFallsThrough() throws {
        var program = ClassicBPF()
        let (set, alias, alias2, seven) = (program.newLabel(), program.newLabel(), program.newLabel(), program.newLabel())
        program.load(0)
        program.jump(if: .equal, 7, then: seven)  // else: next instruction
        program.jump(if: .anyBitSet, 0x40, then: set, else: seven)
        program.ret(1)
        program.place(set)
        program.place(alias)  // two labels on one instruction
        program.jump(if: .greaterOrEqual, 100, then: alias2, else: nil)
        program.place(alias2)
        program.ret(2)
        program.place(seven)
        program.ret(3)
        #expect(try program.instructions() == [
            Instruction(code: 0x20, jt: 0, jf: 0, k: 0),
            Instruction(code: 0x15, jt: 4, jf: 0, k: 7),
            Instruction(code: 0x45, jt: 1, jf: 3, k: 0x40),
            Instruction(code: 0x06, jt: 0, jf: 0, k: 1),
            Instruction(code: 0x35, jt: 0, jf: 0, k: 100),
            Instruction(code: 0x06, jt: 0, jf: 0, k: 2),
            Instruction(code: 0x06, jt: 0, jf: 0, k: 3),
        ])
        // struct sock_filter: u16 code, u8 jt, u8 jf, u32 k, in host order.
        let bytes = try program.assemble()
        #expect(bytes.count == 7 * 8)
        #expect(Array(bytes[8..<16]) == [0x15, 0x00, 4, 0, 7, 0, 0, 0])
        #expect(Array(bytes[16..<24]) == [0x45, 0x00, 1, 3, 0x40, 0, 0, 0])
    }

    @Test func mistakesAreRefusedWhenBuilt() throws {
        var undefined = ClassicBPF()
        undefined.jump(if: .equal, 1, then: undefined.newLabel("nowhere"))
        undefined.ret(0)
        #expect(throws: ClassicBPF.AssemblyError.undefinedLabel("nowhere")) { try undefined.assemble() }

        var duplicate = ClassicBPF()
        let a = duplicate.newLabel("a")
        duplicate.place(a)
        duplicate.ret(0)
        duplicate.place(a)
        duplicate.ret(1)
        #expect(throws: ClassicBPF.AssemblyError.duplicateLabel("a")) { try duplicate.assemble() }

        var backward = ClassicBPF()
        let top = backward.newLabel("top")
        backward.place(top)
        backward.load(0)
        backward.jump(if: .equal, 1, then: top)
        backward.ret(0)
        #expect(throws: ClassicBPF.AssemblyError.backwardJump("top")) { try backward.assemble() }

        var unnamed = ClassicBPF()
        _ = unnamed.newLabel()
        unnamed.jump(to: unnamed.newLabel())
        unnamed.ret(0)
        #expect(throws: ClassicBPF.AssemblyError.undefinedLabel("#1")) { try unnamed.assemble() }

        var open = ClassicBPF()
        open.load(0)
        #expect(throws: ClassicBPF.AssemblyError.fallsOffTheEnd) { try open.assemble() }

        var pastTheEnd = ClassicBPF()
        let end = pastTheEnd.newLabel("end")
        pastTheEnd.jump(if: .equal, 1, then: end)
        pastTheEnd.ret(0)
        pastTheEnd.place(end)
        #expect(throws: ClassicBPF.AssemblyError.fallsOffTheEnd) { try pastTheEnd.assemble() }
    }

    @Test func aJumpOver255InstructionsIsRefusedAnd255IsNot() throws {
        func program(skipping count: Int) -> ClassicBPF {
            var program = ClassicBPF()
            let far = program.newLabel("far")
            program.jump(if: .equal, 1, then: far)
            for _ in 0..<count { program.ret(0) }
            program.place(far)
            program.ret(1)
            return program
        }
        #expect(try program(skipping: 255).instructions().first?.jt == 255)
        #expect(throws: ClassicBPF.AssemblyError.jumpTooFar(label: "far", distance: 256)) {
            try program(skipping: 256).assemble()
        }
    }

    @Test func theArgumentGuardAssemblesForEveryPolicy() throws {
        for network in [false, true] {
            let filter = SyscallFilter(options: .init(networkClient: network))
            let instructions = try filter.argumentGuardProgram().instructions()
            #expect(instructions.count < 200)
            #expect(try filter.argumentGuard().count == instructions.count * 8)
        }
    }

    /// The ioctl numbers in `IoctlRequest` are the kernel's, as Python's
    /// termios module knows them (those it knows).
    @Test func theIoctlNumbersAreTheKernels() throws {
        let ours: [(String, UInt32)] = zip(
            ["TCGETS", "TCSETS", "TCSETSW", "TCSETSF", "TCGETA", "TCSETA", "TCSETAW", "TCSETAF", "TCSBRK", "TCXONC", "TCFLSH",
             "TIOCGPGRP", "TIOCSPGRP", "TIOCOUTQ", "TIOCGWINSZ", "TIOCSWINSZ", "TIOCGSID"],
            IoctlRequest.terminal).map { ($0, $1) }
            + zip(["FIONREAD", "FIONBIO", "FIONCLEX", "FIOCLEX", "FIOASYNC"], IoctlRequest.descriptor).map { ($0, $1) }
            + zip(["TIOCSTI", "TIOCLINUX", "TIOCSETD", "TIOCCONS"], IoctlRequest.terminalTakeover).map { ($0, $1) }
        let code = "import termios\nfor name in \(ours.map(\.0)):\n    print(name, getattr(termios, name, 'absent'))"
        let known = try Run.unconfinedPython(code).output.filter { !$0.hasSuffix(" absent") }
        #expect(known.count >= 20)
        let expected = Dictionary(uniqueKeysWithValues: ours.map { ($0.0, String($0.1)) })
        for line in known {
            let parts = line.split(separator: " ").map(String.init)
            #expect(expected[parts[0]] == parts[1], "\(parts[0])")
        }
    }
}

/// The guard loaded alone, in a process with every capability: in the
/// sandbox the new session and the dropped capabilities would hide a broken
/// guard, so here the guard is all that stands between the call and the kernel.
@Suite(.serialized) struct ArgumentGuardAloneTests {
    static let loader = Attack.prelude + """
        import fcntl, termios, struct
        def load_guard():
            data = open(sys.argv[1], "rb").read()
            buffer = ctypes.create_string_buffer(data, len(data))
            class Program(ctypes.Structure):
                _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
            program = Program(len(data) // 8, ctypes.addressof(buffer))
            assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS (the capabilities stay)
            assert libc.prctl(22, 2, ctypes.byref(program), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        if sys.argv[2] == "guarded":
            load_guard()
        libc.syscall.restype = ctypes.c_long

        """

    /// Runs `code` twice as root with every capability: bare, then behind the guard.
    func run(_ code: String, _ extra: [String] = [], stdin: Int32? = nil) throws -> (bare: [String], guarded: [String]) {
        let scratch = Scratch()
        let program = scratch.path + "/guard.bpf"
        try Data(SyscallFilter(options: .init()).argumentGuard()).write(to: URL(fileURLWithPath: program))
        func once(_ mode: String) throws -> [String] {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Run.python)
            process.arguments = ["-c", Self.loader + code, program, mode] + extra
            if let stdin { process.standardInput = FileHandle(fileDescriptor: stdin, closeOnDealloc: false) }
            let out = Pipe()
            process.standardOutput = out
            try process.run()
            let data = try out.fileHandleForReading.readAll()
            process.waitUntilExit()
            return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
        }
        return (try once("bare"), try once("guarded"))
    }

    @Test func terminalIoctlsAreAnAllowList() throws {
        var master: Int32 = -1
        var slave: Int32 = -1
        try #require(csb_open_pty(&master, &slave) == 0)
        defer { close(master); close(slave) }
        let code = """
            attempt("TIOCSTI", lambda: fcntl.ioctl(0, termios.TIOCSTI, b"x"))
            attempt("TIOCSTI-64", lambda: fcntl.ioctl(0, termios.TIOCSTI | (1 << 32), b"x"))
            attempt("TIOCLINUX", lambda: fcntl.ioctl(0, 0x541C, b"\\x06\\x00"))
            attempt("TCGETS", lambda: fcntl.ioctl(0, termios.TCGETS, bytes(64)))
            attempt("TCGETS-64", lambda: fcntl.ioctl(0, termios.TCGETS | (1 << 32), bytes(64)))
            attempt("TIOCGWINSZ", lambda: fcntl.ioctl(0, termios.TIOCGWINSZ, bytes(8)))
            attempt("TIOCEXCL", lambda: fcntl.ioctl(0, termios.TIOCEXCL))
            try:
                fcntl.ioctl(0, termios.TIOCNXCL)  # undo TIOCEXCL where it worked
            except OSError:
                pass
            """
        let (bare, guarded) = try run(code, stdin: slave)
        // TIOCLINUX is for virtual consoles only: ENOTTY on a pty either way.
        #expect(bare == ["TIOCSTI ok", "TIOCSTI-64 ok", "TIOCLINUX ENOTTY", "TCGETS ok", "TCGETS-64 ok", "TIOCGWINSZ ok", "TIOCEXCL ok"])
        #expect(guarded == [
            "TIOCSTI EPERM", "TIOCSTI-64 EPERM", "TIOCLINUX EPERM", "TCGETS ok", "TCGETS-64 ok", "TIOCGWINSZ ok", "TIOCEXCL ENOTTY",
        ])
    }

    /// dnotify on a folder held open would outlive the folder's revocation,
    /// and a lease would make host processes wait: both refused.
    @Test func directoryNotificationsAndLeasesAreRefused() throws {
        let scratch = Scratch()
        let code = """
            fd = os.open(sys.argv[3], os.O_RDONLY | os.O_DIRECTORY)
            attempt("F_NOTIFY", lambda: fcntl.fcntl(fd, fcntl.F_NOTIFY, fcntl.DN_CREATE | fcntl.DN_MULTISHOT))
            file = os.open(sys.argv[3] + "/leased", os.O_RDONLY | os.O_CREAT, 0o600)
            attempt("F_SETLEASE", lambda: fcntl.fcntl(file, fcntl.F_SETLEASE, fcntl.F_RDLCK))
            attempt("F_GETFL", lambda: fcntl.fcntl(file, fcntl.F_GETFL))
            """
        let (bare, guarded) = try run(code, [scratch.path])
        #expect(bare == ["F_NOTIFY ok", "F_SETLEASE ok", "F_GETFL ok"])
        #expect(guarded == ["F_NOTIFY EPERM", "F_SETLEASE EPERM", "F_GETFL ok"])
    }

    @Test func inodeAttributesCannotBeSetThroughAReadOnlyDescriptor() throws {
        let scratch = Scratch()
        let folder = scratch.path + "/granted"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
        let code = """
            fd = os.open(sys.argv[3], os.O_RDONLY)
            def version():
                return struct.unpack("l", fcntl.ioctl(fd, 0x80087601, bytes(8)))[0]  # FS_IOC_GETVERSION
            before = version()
            attempt("FS_IOC_SETVERSION", lambda: fcntl.ioctl(fd, 0x40087602, struct.pack("l", before + 1)))
            attempt("FS_IOC_SETVERSION-64", lambda: fcntl.ioctl(fd, 0x40087602 | (1 << 32), struct.pack("l", before + 1)))
            attempt("EXT4_IOC_SETVERSION", lambda: fcntl.ioctl(fd, 0x40086604, struct.pack("l", before + 1)))
            attempt("FS_IOC_SETFLAGS", lambda: fcntl.ioctl(fd, 0x40086602, struct.pack("l", 0x10)))  # FS_NOATIME_FL
            attempt("FS_IOC_FSSETXATTR", lambda: fcntl.ioctl(fd, 0x401C5820, bytes(28)))
            print("version changed", version() != before)
            """
        let (bare, guarded) = try run(code, [folder])
        #expect(bare == [
            "FS_IOC_SETVERSION ok", "FS_IOC_SETVERSION-64 ok", "EXT4_IOC_SETVERSION ok", "FS_IOC_SETFLAGS ok",
            "FS_IOC_FSSETXATTR ok", "version changed True",
        ])
        #expect(guarded == [
            "FS_IOC_SETVERSION EPERM", "FS_IOC_SETVERSION-64 EPERM", "EXT4_IOC_SETVERSION EPERM", "FS_IOC_SETFLAGS EPERM",
            "FS_IOC_FSSETXATTR EPERM", "version changed False",
        ])
    }

    @Test func setIDFilesCannotBeCreated() throws {
        let scratch = Scratch()
        let code = """
            folder = os.path.join(sys.argv[3], sys.argv[2])
            S_IFREG = 0o100000
            O_TMPFILE = 0o20200000
            report("open-creat-4755", libc.open(os.path.join(folder, "a").encode(), os.O_CREAT | os.O_WRONLY, 0o4755))
            report("openat-creat-2755", libc.openat(-100, os.path.join(folder, "b").encode(), os.O_CREAT | os.O_WRONLY, 0o2755))
            report("openat-creat-high-bits", libc.syscall(257, -100, os.path.join(folder, "c").encode(), (1 << 32) | os.O_CREAT | os.O_WRONLY, 0o4755))
            report("openat-tmpfile-4755", libc.syscall(257, -100, folder.encode(), O_TMPFILE | os.O_WRONLY, 0o4755))
            report("creat-6755", libc.creat(os.path.join(folder, "d").encode(), 0o6755))
            report("mknod-4755", libc.syscall(133, os.path.join(folder, "e").encode(), S_IFREG | 0o4755, 0))
            report("mknodat-2755", libc.syscall(259, -100, os.path.join(folder, "f").encode(), S_IFREG | 0o2755, 0))
            report("openat-creat-0755", libc.openat(-100, os.path.join(folder, "g").encode(), os.O_CREAT | os.O_WRONLY, 0o755))
            report("openat-existing-mode-ignored", libc.syscall(257, -100, os.path.join(folder, "g").encode(), os.O_RDONLY, 0o4755))
            how = (ctypes.c_uint64 * 3)(os.O_RDONLY, 0, 0)
            report("openat2", libc.syscall(437, -100, folder.encode(), ctypes.byref(how), 24))
            print(sorted(name for name in os.listdir(folder) if os.stat(os.path.join(folder, name)).st_mode & 0o6000))
            """
        for mode in ["bare", "guarded"] {
            try FileManager.default.createDirectory(atPath: scratch.path + "/" + mode, withIntermediateDirectories: false)
        }
        let (bare, guarded) = try run(code, [scratch.path])
        #expect(bare.last == "['a', 'b', 'c', 'd', 'e', 'f']")
        #expect(guarded == [
            "open-creat-4755 EPERM", "openat-creat-2755 EPERM", "openat-creat-high-bits EPERM", "openat-tmpfile-4755 EPERM",
            "creat-6755 EPERM", "mknod-4755 EPERM", "mknodat-2755 EPERM", "openat-creat-0755 ok",
            "openat-existing-mode-ignored ok", "openat2 ENOSYS", "[]",
        ])
    }

    /// RENAME_WHITEOUT leaves a 0:0 character device at the old name, which
    /// Landlock does not count as making one: the guard refuses the flag.
    @Test func renamingWithAWhiteoutIsRefused() throws {
        let scratch = Scratch()
        let code = """
            import stat
            folder = os.path.join(sys.argv[3], sys.argv[2])
            renameat2 = 316 if os.uname().machine == "x86_64" else 276
            for name in ("a", "b", "c"): open(os.path.join(folder, name), "w").close()
            def rename(source, target, flags):
                return libc.syscall(renameat2, -100, os.path.join(folder, source).encode(), -100, os.path.join(folder, target).encode(), flags)
            report("whiteout", rename("a", "a2", 4))
            report("whiteout-high-bits", rename("b", "b2", (1 << 32) | 4))
            report("noreplace", rename("c", "c2", 1))
            print(sorted(name for name in os.listdir(folder) if stat.S_ISCHR(os.lstat(os.path.join(folder, name)).st_mode)))
            """
        for mode in ["bare", "guarded"] {
            try FileManager.default.createDirectory(atPath: scratch.path + "/" + mode, withIntermediateDirectories: false)
        }
        let (bare, guarded) = try run(code, [scratch.path])
        #expect(bare == ["whiteout ok", "whiteout-high-bits ok", "noreplace ok", "['a', 'b']"])
        #expect(guarded == ["whiteout EPERM", "whiteout-high-bits EPERM", "noreplace ok", "[]"])
    }

    @Test func accessModeThreeIsRefusedWhereverTheFileIs() throws {
        // Mode 3 asks Landlock for no right at all: refused by the guard
        // itself, whatever else the flags say; modes 0 to 2 are Landlock's.
        let scratch = Scratch()
        let file = scratch.file("file.txt", "x")
        let code = """
            path = sys.argv[3].encode()
            report("open-3", libc.open(path, 3))
            report("openat-3", libc.openat(-100, path, 3))
            report("openat-3-creat", libc.openat(-100, path, 3 | os.O_CREAT, 0o600))
            report("openat-3-nonblock-cloexec", libc.openat(-100, path, 3 | os.O_NONBLOCK | os.O_CLOEXEC))
            report("openat-3-high-bits", libc.syscall(257, -100, path, (1 << 32) | 3))
            report("openat-rdwr", libc.openat(-100, path, os.O_RDWR))
            report("openat-path", libc.openat(-100, path, os.O_PATH | 3))
            """
        let (bare, guarded) = try run(code, [file])
        #expect(bare == [
            "open-3 ok", "openat-3 ok", "openat-3-creat ok", "openat-3-nonblock-cloexec ok", "openat-3-high-bits ok",
            "openat-rdwr ok", "openat-path ok",
        ])
        // O_PATH ignores the access mode, and Landlock's rules still hold for
        // its later uses; it is refused here too, as mode 3 by its bits.
        #expect(guarded == [
            "open-3 EACCES", "openat-3 EACCES", "openat-3-creat EACCES", "openat-3-nonblock-cloexec EACCES",
            "openat-3-high-bits EACCES", "openat-rdwr ok", "openat-path EACCES",
        ])
    }

    @Test func schedulingOfOtherProcessesIsRefused() throws {
        let sleeper = try Sleeper()
        let other = try Sleeper(uid: 4242)
        let code = HostileAppFilterTests.schedulingAttacks
        let (bare, guarded) = try run(code, [String(sleeper.pid), String(other.pid), "4242"])
        #expect(bare.filter { $0.hasPrefix("other") } == [
            "other-setpriority ok", "other-setpriority-pgrp ok", "other-setpriority-user ok", "other-setaffinity ok",
            "other-setscheduler ok", "other-setparam ok", "other-setattr ok", "other-setpriority-high-bits ok",
        ])
        #expect(guarded == HostileAppFilterTests.schedulingRefused)
    }
}

/// `--explain` costs nothing when off: the filter is the one built without it.
@Suite struct ExplainFilterTests {
    @Test func withoutExplainTheFilterIsByteIdentical() throws {
        for network in [false, true] {
            let plain = try SyscallFilter(options: .init(networkClient: network)).compile()
            var off = SyscallFilter.Options(networkClient: network)
            off.observeDenials = false
            #expect(try SyscallFilter(options: off).compile() == plain)
            var on = off
            on.observeDenials = true
            let observed = try SyscallFilter(options: on).compile()
            #expect(observed != plain)
            // The argument guard never changes.
            #expect(try SyscallFilter(options: on).argumentGuard() == SyscallFilter(options: off).argumentGuard())
        }
    }
}
