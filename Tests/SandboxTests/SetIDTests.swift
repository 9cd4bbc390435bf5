import Foundation
import Testing
import SystemPackage
@testable import Sandbox

/// No file in the sandbox's reach may become set-user-ID or set-group-ID:
/// another local user running it would run it as the launching user (as
/// root, when root launches).
@Suite(.inBothViews) struct SetIDTests {
    /// Every way to give a file a set-id mode, from Python, in the folder argv[1].
    static let attacks = Attack.prelude + """
        import shutil, stat, struct
        libc.syscall.restype = ctypes.c_long
        os.chdir(sys.argv[1])
        shutil.copy("/bin/true", "t")
        attempt("chmod-4755", lambda: os.chmod("t", 0o4755))
        attempt("chmod-2755", lambda: os.chmod("t", 0o2755))
        fd = os.open("t", os.O_RDONLY)
        attempt("fchmod-6755", lambda: os.fchmod(fd, 0o6755))
        report("fchmodat-4755", libc.syscall(268, -100, b"t", 0o4755))
        report("fchmodat2-4755", libc.syscall(452, -100, b"t", 0o4755, 0x100))  # AT_SYMLINK_NOFOLLOW
        attempt("proc-fd-4755", lambda: os.chmod("/proc/self/fd/%d" % fd, 0o4755))
        os.mkdir("d")
        attempt("dir-2775", lambda: os.chmod("d", 0o2775))
        gid = oct(os.stat("d").st_mode & 0o7777)
        attempt("dir-4775", lambda: os.chmod("d", 0o4775))
        attempt("open-creat-4755", lambda: os.open("u", os.O_CREAT | os.O_WRONLY, 0o4755))
        attempt("mknod-2755", lambda: os.mknod("v", stat.S_IFREG | 0o2755))
        # File capabilities would do the same as set-user-ID: cap_setuid+ep.
        attempt("security.capability", lambda: os.setxattr("t", "security.capability", struct.pack("<5I", 0x02000001, 1 << 7, 0, 0, 0)))
        print("modes", oct(os.stat("t").st_mode & 0o7777), gid, oct(os.stat("d").st_mode & 0o7777))
        print("capability", "security.capability" in os.listxattr("t"))
        """

    @Test func noSetIDBitEverAppearsAsRoot() throws {
        let scratch = Scratch()
        // Unconfined, every attack works (root has CAP_SETFCAP).
        let unconfined = try Run.unconfined([Run.python, "-c", Self.attacks, scratch.path])
        #expect(unconfined.output.last == "capability True", "\(unconfined.stderr)")
        #expect(unconfined.output.dropLast().last == "modes 0o4755 0o2775 0o4775")
        #expect(setIDFiles(beneath: scratch.path) == ["d", "t", "u", "v"])

        let confined = try Run.confined([Run.python, "-c", Self.attacks, "Documents"], in: scratch)
        // chmod succeeds without the set-user-ID bit (and set-group-ID stays on folders only);
        // creating a set-id file is refused.
        #expect(confined.output == [
            "chmod-4755 ok", "chmod-2755 ok", "fchmod-6755 ok", "fchmodat-4755 ok", "fchmodat2-4755 ok", "proc-fd-4755 ok",
            "dir-2775 ok", "dir-4775 ok", "open-creat-4755 EPERM", "mknod-2755 EPERM", "security.capability EPERM",
            "modes 0o755 0o2775 0o775", "capability False",
        ], "\(confined.stderr)")
        let container = try AppContainer.current(for: AppID("com.example.tests"), base: scratch.containers)
        #expect(setIDFiles(beneath: container.root).isEmpty)
    }

    @Test func noSetIDBitEverAppearsForAnUnprivilegedLauncher() throws {
        let nobody: uid_t = 65534
        let home = Launcher.Home(owner: nobody)
        // Unconfined, the same user makes a set-user-ID binary: anyone who runs it is that user.
        let outside = home.path + "/outside"
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: false)
        chown(outside, nobody, nobody)
        let unconfined = try Launcher.program(Launcher.setpriv(nobody) + [Run.python, "-c", Self.attacks, outside])
        #expect(unconfined.output.contains("modes 0o4755 0o2775 0o4775"), "\(unconfined.stderr)")
        #expect(setIDFiles(beneath: outside) == ["d", "t", "u", "v"])
        try FileManager.default.removeItem(atPath: outside)

        let confined = try Launcher.run([Run.python, "-c", Self.attacks, "Documents"], home: home, as: nobody)
        #expect(confined.status == 0, "\(confined.stderr)")
        #expect(confined.output == [
            "chmod-4755 ok", "chmod-2755 ok", "fchmod-6755 ok", "fchmodat-4755 ok", "fchmodat2-4755 ok", "proc-fd-4755 ok",
            "dir-2775 ok", "dir-4775 ok", "open-creat-4755 EPERM", "mknod-2755 EPERM", "security.capability EPERM",
            "modes 0o755 0o2775 0o775", "capability False",
        ], "\(confined.stderr)")
        #expect(setIDFiles(beneath: home.path).isEmpty)
    }

    @Test func aSetIDFileCannotBeLinkedOrMovedInAndCopiesLoseTheBit() throws {
        // A set-user-ID file in a read-only grant: Landlock gives that folder no
        // "refer" right, so it cannot be linked into the container (EXDEV), nor
        // moved (nor removed: EACCES); a copy is a new file whose mode goes
        // through the guard (creation) and the supervisor (cp -p's chmod).
        let scratch = Scratch()
        func shelf(_ name: String) throws -> String {
            let folder = scratch.path + "/" + name
            try FileManager.default.createDirectory(atPath: folder + "/Documents", withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: "/bin/true", toPath: folder + "/tool")
            #expect(chmod(folder + "/tool", 0o4755) == 0)
            return folder
        }
        let code = Attack.prelude + """
            import shutil, subprocess
            tool = sys.argv[1] + "/tool"
            print("cp", subprocess.run(["cp", "-a", tool, "Documents/copied"]).returncode)
            print("install", subprocess.run(["install", "-m", "4755", tool, "Documents/installed"]).returncode)
            print(oct(os.stat("Documents/copied").st_mode & 0o7777), oct(os.stat("Documents/installed").st_mode & 0o7777))
            attempt("link", lambda: os.link(tool, "Documents/linked"))
            attempt("rename", lambda: os.rename(tool, "Documents/moved"))
            """
        let host = try shelf("host")
        let unconfined = try Launcher.program([Run.python, "-c", code, host], directory: host)
        #expect(unconfined.output == ["cp 0", "install 0", "0o4755 0o4755", "link ok", "rename ok"], "\(unconfined.stderr)")
        #expect(setIDFiles(beneath: host) == ["Documents/copied", "Documents/installed", "Documents/linked", "Documents/moved"])

        let shelf = try shelf("shelf")
        let grant = try ConfinementPlan.openVerified(shelf)
        let confined = try Run.confined([Run.python, "-c", code, shelf], in: scratch) {
            $0.folders = [PathRule(grant: "SHELF", path: FilePath(shelf), descriptor: grant, access: .readOnly)]
        }
        // In the private view the grant is a mount of its own: the kernel
        // refuses the rename across mounts (EXDEV) before Landlock is asked.
        #expect(confined.output == ["cp 0", "install 0", "0o755 0o755", "link EXDEV", "rename \(Views.current == .private ? "EXDEV" : "EACCES")"],
                "\(confined.stderr)")
        let container = try AppContainer.current(for: AppID("com.example.tests"), base: scratch.containers)
        #expect(setIDFiles(beneath: container.root).isEmpty)
    }

    @Test func tarAsRootExtractsSetIDEntriesWithoutTheBits() throws {
        // tar as root restores modes exactly: with the bits stripped rather
        // than refused, it still succeeds, and nothing set-user-ID lands.
        let scratch = Scratch()
        let source = scratch.path + "/package"
        let script = """
            set -e
            mkdir -p '\(source)/bin' '\(source)/shared'
            cp /bin/true '\(source)/bin/tool' && chmod 4755 '\(source)/bin/tool'
            chmod 2775 '\(source)/shared'
            tar -C '\(scratch.path)' -cf '\(scratch.path)/shelf/package.tar' package
            """
        try FileManager.default.createDirectory(atPath: scratch.path + "/shelf", withIntermediateDirectories: false)
        #expect(try Run.unconfined(["/bin/sh", "-c", script]).termination == .exited(0))
        let grant = try ConfinementPlan.openVerified(scratch.path + "/shelf")
        let confined = try Run.confined(["/bin/sh", "-c", "tar xf '\(scratch.path)/shelf/package.tar' && stat -c '%a %n' package/bin/tool package/shared"], in: scratch) {
            $0.folders = [PathRule(grant: "SHELF", path: FilePath(scratch.path + "/shelf"), descriptor: grant, access: .readOnly)]
        }
        #expect(confined.termination == .exited(0), "\(confined.stderr)")
        #expect(confined.output == ["755 package/bin/tool", "2775 package/shared"])
    }
}
