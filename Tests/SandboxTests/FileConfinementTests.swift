import Foundation
import Testing
import SystemPackage
@testable import Sandbox

/// Contents, names and metadata outside the policy's paths and the
/// container stay out of reach. Each attack is shown to work unconfined.
@Suite(.inBothViews) struct FileConfinementTests {
    @Test func readingAFileOutsideIsRefused() throws {
        let scratch = Scratch()
        let secret = scratch.file("secret.txt", "the secret\n")
        #expect(try Run.unconfined(["/bin/cat", secret]).stdout == "the secret\n")
        let confined = try Run.confined(["/bin/cat", secret], in: scratch)
        #expect(confined.termination == .exited(1))
        #expect(confined.stdout.isEmpty)
        // In the private view the file does not exist; in the host view Landlock refuses it.
        #expect(confined.stderr.contains(Views.current == .private ? "No such file or directory" : "Permission denied"))
    }

    @Test func listingAFolderOutsideIsRefused() throws {
        let scratch = Scratch()
        scratch.file("hidden-name.txt")
        #expect(try Run.unconfined(["/bin/ls", scratch.path]).stdout.contains("hidden-name.txt"))
        let confined = try Run.confined(["/bin/ls", scratch.path], in: scratch)
        #expect(!confined.stdout.contains("hidden-name.txt"))
        #expect(confined.stderr.contains("Permission denied"))
    }

    @Test func readingShadowIsRefusedEvenAsRoot() throws {
        // /etc as a whole is not in the policy: only the files writers need.
        let confined = try Run.confined(["/bin/cat", "/etc/shadow"], in: Scratch())
        #expect(confined.termination != .exited(0))
        #expect(confined.stdout.isEmpty)
    }

    @Test func writingCreatingAndDeletingOutsideAreRefused() throws {
        let scratch = Scratch()
        let victim = scratch.file("victim.txt", "keep me\n")
        let code = Attack.prelude + """
            attempt("append", lambda: open(sys.argv[1], "a").write("owned"))
            attempt("create", lambda: open(sys.argv[2], "w").write("owned"))
            attempt("unlink", lambda: os.unlink(sys.argv[1]))
            attempt("rename", lambda: os.rename(sys.argv[1], sys.argv[1] + ".moved"))
            attempt("truncate", lambda: os.truncate(sys.argv[1], 0))
            attempt("tmp", lambda: open("/tmp/sandboxed-run-escape", "w"))
            """
        let args = [Run.python, "-c", code, victim, scratch.path + "/new.txt"]
        let confined = try Run.confined(args, in: scratch)
        if Views.current == .private {
            // The scratch folder is a folder of the view's read-only root (the
            // container lies beneath it), without the victim; /tmp is the
            // sandbox's own, and nothing written there reaches the host's.
            #expect(confined.output == ["append EROFS", "create EROFS", "unlink EROFS", "rename EROFS", "truncate ENOENT", "tmp ok"])
            #expect(!FileManager.default.fileExists(atPath: "/tmp/sandboxed-run-escape"))
        } else {
            #expect(confined.output == ["append EACCES", "create EACCES", "unlink EACCES", "rename EACCES", "truncate EACCES", "tmp EACCES"])
        }
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "keep me\n")
        #expect(!FileManager.default.fileExists(atPath: scratch.path + "/new.txt"))

        let unconfined = try Run.unconfined(args)
        #expect(unconfined.output.prefix(2) == ["append ok", "create ok"])
        try? FileManager.default.removeItem(atPath: "/tmp/sandboxed-run-escape")
    }

    @Test func metadataChangesOutsideAreRefused() throws {
        let scratch = Scratch()
        let victim = scratch.file("victim.txt")
        chmod(victim, 0o600)
        let code = Attack.prelude + """
            path = sys.argv[1]
            attempt("chmod", lambda: os.chmod(path, 0o777))
            attempt("utime", lambda: os.utime(path, (0, 0)))
            attempt("chown", lambda: os.chown(path, os.getuid(), os.getgid()))
            attempt("setxattr", lambda: os.setxattr(path, "user.owned", b"1"))
            fd = os.open(path, os.O_RDONLY)
            attempt("fchmod", lambda: os.fchmod(fd, 0o777))
            attempt("futimens", lambda: os.utime(fd, (0, 0)))
            attempt("fsetxattr", lambda: os.setxattr(fd, "user.owned", b"1"))
            """
        let args = [Run.python, "-c", code, victim]
        let before = try FileManager.default.attributesOfItem(atPath: victim)
        let confined = try Run.confined(args, in: scratch)
        // Reading the file is refused by Landlock, so the fd-based attacks
        // cannot even start; the path-based ones reach the supervisor.
        #expect(confined.output.prefix(4) == ["chmod", "utime", "chown", "setxattr"].map { "\($0) \(Views.outside("EPERM"))" }[...])
        let after = try FileManager.default.attributesOfItem(atPath: victim)
        #expect(after[.posixPermissions] as? Int == 0o600)
        #expect(after[.modificationDate] as? Date == before[.modificationDate] as? Date)

        let unconfined = try Run.unconfined(args)
        #expect(unconfined.output == ["chmod ok", "utime ok", "chown ok", "setxattr ok", "fchmod ok", "futimens ok", "fsetxattr ok"])
    }

    @Test func metadataOfReadableSystemFilesCannotChange() throws {
        // The sandbox may open /usr files (read-execute), so an fd-based
        // chmod gets as far as the supervisor, which refuses it. A root
        // child owns these files and would otherwise succeed.
        let scratch = Scratch()
        let code = Attack.prelude + """
            fd = os.open("/usr/bin/true", os.O_RDONLY)
            attempt("fchmod", lambda: os.fchmod(fd, 0o4755))
            attempt("futimens", lambda: os.utime(fd, (0, 0)))
            attempt("fchown", lambda: os.fchown(fd, os.getuid(), os.getgid()))
            attempt("chmod-devnull", lambda: os.chmod("/dev/null", 0o600))
            attempt("touch-passwd", lambda: os.utime("/etc/passwd"))
            """
        let before = try FileManager.default.attributesOfItem(atPath: "/usr/bin/true")
        let confined = try Run.confinedPython(code, in: scratch)
        #expect(confined.output == ["fchmod EPERM", "futimens EPERM", "fchown EPERM", "chmod-devnull EPERM", "touch-passwd EPERM"])
        let after = try FileManager.default.attributesOfItem(atPath: "/usr/bin/true")
        #expect(after[.posixPermissions] as? Int == before[.posixPermissions] as? Int)
        #expect(after[.modificationDate] as? Date == before[.modificationDate] as? Date)
    }

    @Test func symlinkInsideToATargetOutsideDoesNotCarryMetadataChanges() throws {
        let scratch = Scratch()
        let victim = scratch.file("victim.txt")
        chmod(victim, 0o600)
        let code = Attack.prelude + """
            os.symlink(sys.argv[1], "Documents/link")
            attempt("chmod-through-link", lambda: os.chmod("Documents/link", 0o777))
            attempt("utime-through-link", lambda: os.utime("Documents/link", (0, 0)))
            attempt("lutime-link-itself", lambda: os.utime("Documents/link", (5, 5), follow_symlinks=False))
            """
        let confined = try Run.confined([Run.python, "-c", code, victim], in: scratch, policy: .withLinks)
        #expect(confined.output == ["chmod-through-link \(Views.outside("EPERM"))", "utime-through-link \(Views.outside("EPERM"))", "lutime-link-itself ok"])
        #expect(try FileManager.default.attributesOfItem(atPath: victim)[.posixPermissions] as? Int == 0o600)
    }

    @Test func metadataChangesInsideTheContainerWork() throws {
        let scratch = Scratch()
        let code = Attack.prelude + """
            open("Documents/note.md", "w").write("x")
            attempt("chmod", lambda: os.chmod("Documents/note.md", 0o640))
            attempt("utime", lambda: os.utime("Documents/note.md", (1000000000, 1000000000)))
            attempt("setxattr", lambda: os.setxattr("Documents/note.md", "user.tag", b"blue"))
            fd = os.open("Documents/note.md", os.O_RDONLY)
            attempt("fchmod", lambda: os.fchmod(fd, 0o600))
            attempt("dir-chmod", lambda: os.chmod("Documents", 0o700))
            st = os.stat("Documents/note.md")
            print(oct(st.st_mode & 0o777), int(st.st_mtime), os.getxattr("Documents/note.md", "user.tag"))
            """
        let confined = try Run.confinedPython(code, in: scratch)
        #expect(confined.output == ["chmod ok", "utime ok", "setxattr ok", "fchmod ok", "dir-chmod ok", "0o600 1000000000 b'blue'"])
    }

    @Test func theSupervisorActsWithTheChildsPowersNotTheLaunchers() throws {
        // The supervisor performs metadata changes itself. If it kept a root
        // launcher's capabilities, a child could chown its files to anyone
        // (CAP_CHOWN). It clears them first, so the kernel says no, as it
        // would to the child.
        let scratch = Scratch()
        let code = Attack.prelude + """
            open("Documents/f", "w").write("x")
            attempt("chown-other-uid", lambda: os.chown("Documents/f", 4242, 4242))
            attempt("chown-own", lambda: os.chown("Documents/f", os.getuid(), os.getgid()))
            """
        if getuid() == 0 {
            let file = scratch.file("mine")
            #expect(try Run.unconfinedPython("import os; os.chown('\(file)', 4242, 4242); print('ok')").output == ["ok"])
        }
        #expect(try Run.confinedPython(code, in: scratch).output == ["chown-other-uid EPERM", "chown-own ok"])
    }

    /// Watches a folder for IN_CREATE, creates `name` in it when it may, and prints
    /// the watch outcome and the name the kernel reported.
    static let watcher = Attack.prelude + """
        import struct
        fd = libc.inotify_init1(os.O_NONBLOCK)
        wd = libc.inotify_add_watch(fd, sys.argv[1].encode(), 0x100)
        report("watch", wd)
        if wd >= 0:
            open(os.path.join(sys.argv[1], sys.argv[2]), "w").close()
            event = os.read(fd, 4096)
            length = struct.unpack_from("iIII", event)[3]
            print("saw", event[16:16 + length].rstrip(b"\\0").decode())
        """

    @Test func watchingAFolderOutsideIsRefused() throws {
        // An inotify watch reports the names of files created in the folder:
        // Landlock does not mediate it, the supervisor does.
        let scratch = Scratch()
        let outside = scratch.path + "/private"
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        let args = [Run.python, "-c", Self.watcher, outside, "salary-2026.xlsx"]
        #expect(try Run.unconfined(args).output == ["watch ok", "saw salary-2026.xlsx"])
        let confined = try Run.confined(args, in: scratch)
        #expect(confined.output == ["watch \(Views.outside("EACCES"))"])
    }

    @Test func watchingInsideTheContainerWorks() throws {
        let scratch = Scratch()
        let confined = try Run.confined([Run.python, "-c", Self.watcher, "Documents", "note.md"], in: scratch)
        #expect(confined.output == ["watch ok", "saw note.md"])
        // Through a symlink in the container to a folder outside: still refused.
        let outside = scratch.path + "/private"
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        let code = "import os; os.symlink('\(outside)', 'Documents/link')\n" + Self.watcher
        #expect(try Run.confined([Run.python, "-c", code, "Documents/link", "x"], in: scratch, policy: .withLinks).output == ["watch \(Views.outside("EACCES"))"])
    }

    @Test func aFolderSwappedAfterVerificationIsNotTheOneRuled() throws {
        // The rule is added through the fd that was verified. Someone who swaps
        // the folder between the check and the launch gets nothing: the
        // command may use the verified folder (under its new name) and not the
        // impostor at the old path. A launcher that re-opened the path would.
        let scratch = Scratch()
        let (vault, verified) = try scratch.folderSwappedAfterVerification("vault")
        let script = "echo x > \(vault)/planted && echo impostor-written; echo y > \(vault)-original/note && echo original-written"
        let launch = { () throws -> Outcome in
            try Run.confined(["/bin/sh", "-c", script], in: scratch) {
                $0.folders = [PathRule(grant: "VAULT", path: FilePath(vault), descriptor: verified, access: .readWrite)]
            }
        }
        if Views.current == .private {
            // The view would hold the verified folder at its new name while
            // the command is told the old one: the launch stops instead.
            let error = #expect(throws: SandboxError.self) { try launch() }
            guard case .viewUnavailable(let reason)? = error else { Issue.record("\(String(describing: error))"); return }
            #expect(reason.contains("no longer leads to the folder that was checked"))
        } else {
            #expect(try launch().output == ["original-written"])
        }
        #expect(!FileManager.default.fileExists(atPath: vault + "/planted"))
    }

    @Test func tmpIsNotTheHostsButTMPDIRIsPrivate() throws {
        let scratch = Scratch()
        let name = "/tmp/sandboxed-run-" + UUID().uuidString
        let confined = try Run.confined(["/bin/sh", "-c", "echo x > \(name); echo $? ; f=$(mktemp) && echo made $f"], in: scratch)
        let container = try AppContainer.current(for: AppID("com.example.tests"), base: scratch.containers)
        // The private view's /tmp is the sandbox's own (gone with it); the host view has none.
        #expect(confined.output.first == (Views.current == .private ? "0" : "2"))
        #expect(!FileManager.default.fileExists(atPath: name))
        #expect(confined.output.last?.hasPrefix("made \(container.temporary)/") == true)
    }

    @Test func openingWithNeitherReadNorWriteAccessIsRefused() throws {
        // Access mode 3 ("check read and write permission, allow neither")
        // asks Landlock for no right: it opened any file and device node the
        // uid may, and the descriptor read extended attributes and inode
        // flags of files the policy never named.
        let scratch = Scratch()
        let download = scratch.file("statement.pdf")
        try HostileAppFilterTests.setOrigin(of: download)
        var paths = [download]
        // Opening a device runs its driver's open routine (a watchdog starts,
        // a tape rewinds): a node of /dev/null's numbers, here, where root may
        // make one and the scratch folder's mount allows devices (not nodev).
        let device = scratch.path + "/device"
        if mknod(device, S_IFCHR | 0o600, dev_t((1 << 8) | 3)) == 0 {
            let probe = open(device, O_RDONLY | O_CLOEXEC)
            if probe >= 0 {
                close(probe)
                paths.append(device)
            }
        }
        let code = Attack.prelude + """
            import fcntl
            fd = -1
            def open3():
                global fd
                fd = os.open(sys.argv[1], 3)
            attempt("open-3", open3)
            if fd >= 0:
                attempt("fgetxattr", lambda: print(os.getxattr(fd, "user.xdg.origin.url")))
                attempt("FS_IOC_GETFLAGS", lambda: fcntl.ioctl(fd, 0x80086601, bytes(8)))
            for device in sys.argv[2:]:
                attempt("device-open-3", lambda: os.open(device, 3))
            """
        let args = [Run.python, "-c", code] + paths
        let devices = paths.count > 1 ? ["device-open-3 ok"] : []
        #expect(try Run.unconfined(args).output == ["open-3 ok", "b'https://example.com/x'", "fgetxattr ok", "FS_IOC_GETFLAGS ok"] + devices)
        let confined = try Run.confined(args, in: scratch)
        #expect(confined.output == ["open-3 EACCES"] + devices.map { _ in "device-open-3 EACCES" }, "\(confined.stderr)")
    }

    @Test func handleBasedOpensAreRefused() throws {
        let code = Attack.prelude + """
            class FileHandle(ctypes.Structure):
                _fields_ = [("size", ctypes.c_uint), ("type", ctypes.c_int), ("data", ctypes.c_ubyte * 128)]
            h = FileHandle(); h.size = 128
            mount = ctypes.c_int()
            report("name_to_handle_at", libc.name_to_handle_at(-100, b"/usr", ctypes.byref(h), ctypes.byref(mount), 0))
            report("open_by_handle_at", libc.open_by_handle_at(3, ctypes.byref(h), 0))
            """
        #expect(try Run.unconfinedPython(code).output.first == "name_to_handle_at ok")
        let confined = try Run.confinedPython(code, in: Scratch())
        #expect(confined.output == ["name_to_handle_at EPERM", "open_by_handle_at EPERM"])
    }
}
