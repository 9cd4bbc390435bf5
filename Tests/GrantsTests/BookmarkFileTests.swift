import Foundation
import Glibc
import Testing
@testable import Grants
@testable import Sandbox

/// Bookmark files live where the app can write: whatever it plants there is
/// refused, never followed, never waited on.
@Suite struct BookmarkFileTests {
    func open(_ path: String) throws -> OwnedDescriptor {
        try ConfinementPlan.openVerified(path)
    }

    @Test func aFIFOIsRefusedAtOnce() throws {
        let home = Home()
        let fifo = home.path + "/user/vault.bookmark"
        #expect(mkfifo(fifo, 0o600) == 0)
        let started = Date()
        #expect(throws: GrantError.bookmarkFile(path: fifo, problem: "is a FIFO, not a bookmark file")) {
            try BookmarkFile(path: fifo, trust: LinkTrust(appFolders: [])).read()
        }
        #expect(throws: GrantError.self) { try BookmarkFile(path: fifo, trust: LinkTrust(appFolders: [])).replace(with: [1, 2, 3]) }
        #expect(Date().timeIntervalSince(started) < 2)
    }

    @Test func aDeviceIsNeverReplaced() throws {
        try #require(getuid() == 0, "making a device node needs root")
        let home = Home()
        let device = home.path + "/user/vault.bookmark"
        #expect(mknod(device, S_IFCHR | 0o600, dev_t((1 << 8) | 3)) == 0)  // a null device, in scratch
        #expect(throws: GrantError.self) { try BookmarkFile(path: device, trust: LinkTrust(appFolders: [])).replace(with: [1, 2, 3]) }
        var st = stat()
        #expect(lstat(device, &st) == 0 && st.st_mode & S_IFMT == S_IFCHR)
        #expect(try FileManager.default.contentsOfDirectory(atPath: home.path + "/user") == ["vault.bookmark"], "no temporary file left")
    }

    @Test func aLeafSymlinkIsRefusedAndItsTargetUntouched() throws {
        let home = Home()
        let target = home.path + "/user/precious"
        try "keep me\n".write(toFile: target, atomically: true, encoding: .utf8)
        let link = home.path + "/user/vault.bookmark"
        #expect(symlink(target, link) == 0)
        #expect(throws: GrantError.self) { try BookmarkFile(path: link, trust: LinkTrust(appFolders: [])).read() }
        #expect(throws: GrantError.self) { try BookmarkFile(path: link, trust: LinkTrust(appFolders: [])).replace(with: [1]) }
        #expect(try String(contentsOfFile: target, encoding: .utf8) == "keep me\n")
    }

    /// A symlink the user made (outside the app's folders) is followed, as the shell would.
    @Test func aUsersOwnSymlinkIsFollowed() throws {
        let home = Home()
        let real = try home.folder("real")
        #expect(symlink(real, home.path + "/user/shortcut") == 0)
        let file = try BookmarkFile(path: home.path + "/user/shortcut/v.bookmark", trust: LinkTrust(appFolders: []))
        try file.replace(with: Array("data".utf8))
        #expect(try file.read() == Array("data".utf8))
        #expect(FileManager.default.fileExists(atPath: real + "/v.bookmark"))
    }

    /// The app flips its folder between a real folder and a symlink to a
    /// folder it cannot write. Rewriting the bookmark by path lands files
    /// there; through one verified folder descriptor it never does.
    @Test func aFolderFlippedToASymlinkNeverRedirectsAWrite() throws {
        let home = Home()
        let app = try home.folder("container")
        let elsewhere = try home.folder("elsewhere")
        let library = app + "/Library"
        let flipper = Flipper(library: library, elsewhere: elsewhere)
        flipper.start()
        defer { flipper.stop() }
        let untrusted = [try open(app)]

        // Without the protection: the plain writer, a temporary file renamed over the target, by path.
        for _ in 0..<20_000 where (try? FileManager.default.contentsOfDirectory(atPath: elsewhere))?.isEmpty != false {
            let temporary = library + "/.v.bookmark.tmp"
            let fd = Glibc.open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            if fd >= 0 { close(fd); rename(temporary, library + "/v.bookmark") }
        }
        let landed = try FileManager.default.contentsOfDirectory(atPath: elsewhere).count
        #expect(landed > 0, "the flip never redirected the naive writer: the test proves nothing")
        for name in try FileManager.default.contentsOfDirectory(atPath: elsewhere) { unlink(elsewhere + "/" + name) }

        var refused = 0
        for _ in 0..<300 {
            do { try BookmarkFile(path: library + "/v.bookmark", trust: LinkTrust(appFolders: untrusted)).replace(with: [2]) } catch { refused += 1 }
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: elsewhere) == [])
        #expect(refused > 0 && refused < 300, "both shapes were met: \(refused) refused")
    }
}

/// Flips `library` between a folder and a symlink to `elsewhere`, as fast as it can.
final class Flipper: @unchecked Sendable {
    let library: String
    let elsewhere: String
    private let running = NSLock()
    private var stopped = false
    private var thread: Thread?

    init(library: String, elsewhere: String) {
        self.library = library
        self.elsewhere = elsewhere
    }

    func start() {
        let real = library + ".real"
        let link = library + ".link"
        mkdir(real, 0o700)
        symlink(elsewhere, link)
        let thread = Thread { [self] in
            while !isStopped {
                // The link, then the real folder, each for a moment under the name `library`.
                rename(link, library)
                usleep(50)
                rename(library, link)
                rename(real, library)
                usleep(50)
                rename(library, real)
            }
        }
        self.thread = thread
        thread.start()
    }

    var isStopped: Bool {
        running.lock()
        defer { running.unlock() }
        return stopped
    }

    func stop() {
        running.lock()
        stopped = true
        running.unlock()
        usleep(20_000)
    }
}
