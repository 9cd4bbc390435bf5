import Foundation
import Testing
@testable import Grants
import Sandbox

/// Another user's state, or one others can reach, is refused as OpenSSH
/// refuses such a ~/.ssh: with an error naming the path, the problem and the
/// fix. Nothing is repaired silently, and no link in the state is followed.
@Suite struct StateTrustTests {
    static let isRoot = getuid() == 0

    /// Makes a state with one grant, as a first pick does; returns the key's path.
    @discardableResult
    func populated(_ home: Home) throws -> String {
        _ = try home.broker().grant(app: memo, folder: try home.folder("vault"), access: .readWrite)
        let key = try #require(try FileManager.default.contentsOfDirectory(atPath: home.statePath + "/keys").first { $0.hasSuffix(".key") })
        return home.statePath + "/keys/" + key
    }

    /// Opening the broker fails with a refusal that names `path` and says `words`.
    func expectRefused(_ home: Home, naming path: String, saying words: [String], sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            let broker = try home.broker()
            _ = try broker.grant(app: memo, folder: try home.folder("vault"), access: .readWrite)
            Issue.record("the state was used", sourceLocation: sourceLocation)
        } catch {
            let text = "\(error)"
            #expect(text.contains(path + " "), "\(text)", sourceLocation: sourceLocation)
            for word in words { #expect(text.contains(word), "\(text)", sourceLocation: sourceLocation) }
        }
    }

    func mode(_ path: String) -> Int { (try? FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? -1 }

    @Test(.enabled(if: isRoot, "making files as another user needs root"))
    func aStateAnotherUserMadeWithAPlantedKeyIsRefused() throws {
        // uid 65534 makes the state folder before its owner ever used it, and
        // plants a key it knows: all zeros, named current.
        let home = Home()
        let keys = home.statePath + "/keys"
        try FileManager.default.createDirectory(atPath: keys, withIntermediateDirectories: true)
        try "0000000000000000\n".write(toFile: keys + "/current", atomically: false, encoding: .utf8)
        try Data(count: 32).write(to: URL(fileURLWithPath: keys + "/0000000000000000.key"))
        for path in [home.statePath, keys] { chmod(path, 0o700) }
        for path in [keys + "/current", keys + "/0000000000000000.key"] { chmod(path, 0o600) }
        for path in [home.statePath, keys, keys + "/current", keys + "/0000000000000000.key"] { #expect(chown(path, 65534, 65534) == 0) }
        do {
            let blob = try home.broker().grant(app: memo, folder: try home.folder("vault"), access: .readWrite).bookmark
            // Bytes 5..<13 name the sealing key: the planted one.
            Issue.record("the planted state was used: the bookmark is sealed with key \(Keyring.hex(Array(blob[5..<13])))")
        } catch {
            #expect("\(error)".contains("\(home.statePath) is owned by uid 65534, not by you (uid 0)"), "\(error)")
            #expect("\(error)".contains("chown"))
        }
        #expect(!FileManager.default.fileExists(atPath: home.statePath + "/ledger.sqlite"), "nothing is written into it")
    }

    @Test(.enabled(if: isRoot, "chown needs root"))
    func aStateChownedToAnotherUserIsRefused() throws {
        let home = Home()
        try populated(home)
        #expect(chown(home.statePath, 65534, 65534) == 0)
        expectRefused(home, naming: home.statePath, saying: ["owned by uid 65534", "chown"])
    }

    @Test(.enabled(if: isRoot, "chown needs root"), arguments: ["keys", "key", "keys/current", "ledger.sqlite"])
    func aFileInTheStateOwnedByAnotherUserIsRefused(name: String) throws {
        let home = Home()
        let key = try populated(home)
        let path = name == "key" ? key : home.statePath + "/" + name
        #expect(chown(path, 65534, 65534) == 0)
        expectRefused(home, naming: path, saying: ["owned by uid 65534"])
    }

    @Test(arguments: [("keys", 0o755, "chmod 700"), ("key", 0o644, "chmod 600"), ("key", 0o640, "chmod 600"),
                      ("keys/current", 0o644, "chmod 600"), ("ledger.sqlite", 0o644, "chmod 600"), ("ledger.sqlite", 0o604, "chmod 600")])
    func keysCurrentAndLedgerReachableByOthersAreRefused(name: String, mode: Int, fix: String) throws {
        let home = Home()
        let key = try populated(home)
        let path = name == "key" ? key : home.statePath + "/" + name
        #expect(chmod(path, mode_t(mode)) == 0)
        expectRefused(home, naming: path, saying: ["accessible to group or others", "`\(fix) \(path)`"])
        #expect(self.mode(path) == mode, "left as it was")
    }

    @Test(arguments: [0o770, 0o702, 0o777])
    func aStateFolderOthersCanWriteIsRefusedNotRepaired(mode: Int) throws {
        let home = Home()
        try populated(home)
        #expect(chmod(home.statePath, mode_t(mode)) == 0)
        expectRefused(home, naming: home.statePath, saying: ["writable by group or others", "`chmod 700 \(home.statePath)`"])
        #expect(self.mode(home.statePath) == mode, "not silently repaired")
    }

    @Test func aReadableStateFolderIsAccepted() throws {
        // Only writing matters for the folder; its files are private each.
        let home = Home()
        try populated(home)
        #expect(chmod(home.statePath, 0o755) == 0)
        _ = try home.broker().grant(app: memo, folder: try home.folder("vault"), access: .readWrite)
    }

    @Test func aFolderAboveTheStateOthersCanWriteIsRefusedUnlessSticky() throws {
        let home = Home()
        let above = home.path + "/state"
        try populated(home)
        #expect(chmod(above, 0o777) == 0)
        expectRefused(home, naming: above, saying: ["writable by group or others and not sticky", "chmod go-w"])
        #expect(chmod(above, 0o1777) == 0)  // as /tmp
        _ = try home.broker().grant(app: memo, folder: try home.folder("vault"), access: .readWrite)
    }

    @Test(.enabled(if: isRoot, "chown needs root"))
    func aFolderAboveTheStateOwnedByAnotherUserIsRefused() throws {
        let home = Home()
        try populated(home)
        #expect(chown(home.path + "/state", 65534, 65534) == 0)
        expectRefused(home, naming: home.path + "/state", saying: ["owned by uid 65534", "XDG_STATE_HOME"])
    }

    @Test func aLinkedLedgerIsRefusedAndItsTargetUntouched() throws {
        // The ledger used to be opened through a link, then chmod-ed by path:
        // the link's target (any file the user can chmod) became 0600.
        let home = Home()
        try FileManager.default.createDirectory(atPath: home.statePath, withIntermediateDirectories: true)
        chmod(home.statePath, 0o700)
        let target = home.path + "/user/target.txt"
        try "a scratch file\n".write(toFile: target, atomically: false, encoding: .utf8)
        #expect(chmod(target, 0o644) == 0)
        try FileManager.default.createSymbolicLink(atPath: home.statePath + "/ledger.sqlite", withDestinationPath: target)
        expectRefused(home, naming: home.statePath + "/ledger.sqlite", saying: ["is a symbolic link"])
        #expect(mode(target) == 0o644, "the link's target was changed")
        #expect(try String(contentsOfFile: target, encoding: .utf8) == "a scratch file\n")
    }

    @Test(arguments: ["keys", "key", "keys/current", "ledger.sqlite"])
    func aLinkInPlaceOfAStateFileIsRefused(name: String) throws {
        let home = Home()
        let key = try populated(home)
        let path = name == "key" ? key : home.statePath + "/" + name
        let moved = home.path + "/user/moved-" + (path as NSString).lastPathComponent
        #expect(rename(path, moved) == 0)
        try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: moved)
        expectRefused(home, naming: path, saying: ["is a symbolic link"])
    }

    @Test func theStateFolderItselfMustNotBeALink() throws {
        let home = Home()
        try populated(home)
        let real = home.path + "/state/real"
        #expect(rename(home.statePath, real) == 0)
        try FileManager.default.createSymbolicLink(atPath: home.statePath, withDestinationPath: real)
        expectRefused(home, naming: home.statePath, saying: ["is a symbolic link", "XDG_STATE_HOME"])
    }

    @Test func aLinkAboveTheStateIsFollowedOnlyFromFoldersOthersCannotChange() throws {
        let home = Home()
        let real = home.path + "/real"
        try FileManager.default.createDirectory(atPath: real, withIntermediateDirectories: true)
        // A link in a folder only we can write: followed.
        try FileManager.default.createSymbolicLink(atPath: home.path + "/state", withDestinationPath: "real")
        _ = try home.broker().grant(app: memo, folder: try home.folder("vault"), access: .readWrite)
        #expect(FileManager.default.fileExists(atPath: real + "/sandboxed-run/ledger.sqlite"))
        // The same link in a folder anyone can write: whoever can write there
        // could point it at another state, so it is refused.
        let shared = home.path + "/shared"
        try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: true)
        #expect(chmod(shared, 0o777) == 0)
        try FileManager.default.createSymbolicLink(atPath: shared + "/state", withDestinationPath: real)
        do {
            _ = try GrantBroker(state: StateDirectory(path: shared + "/state/sandboxed-run"))
            Issue.record("a state reached from a folder anyone can write was used")
        } catch {
            #expect("\(error)".contains("\(shared) (above the state folder"), "\(error)")
        }
    }

    @Test(arguments: ["keys/current", "key", "ledger.sqlite"])
    func aFIFOInPlaceOfAStateFileIsRefusedWithoutWaiting(name: String) throws {
        let home = Home()
        let key = try populated(home)
        let path = name == "key" ? key : home.statePath + "/" + name
        #expect(unlink(path) == 0 && mkfifo(path, 0o600) == 0)
        expectRefused(home, naming: path, saying: ["is a FIFO"])
    }

    @Test(.enabled(if: isRoot, "lchown needs root"))
    func aLinkAnotherUserMadeInAStickyFolderIsRefused() throws {
        // /tmp-like: anyone may add names, so a name there is only as good as its owner.
        let home = Home()
        let sticky = home.path + "/sticky"
        let real = home.path + "/real"
        for folder in [sticky, real] { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) }
        #expect(chmod(sticky, 0o1777) == 0)
        try FileManager.default.createSymbolicLink(atPath: sticky + "/state", withDestinationPath: real)
        let state = sticky + "/state/sandboxed-run"
        _ = try GrantBroker(state: StateDirectory(path: state)).grant(app: memo, folder: try home.folder("vault"), access: .readWrite)
        #expect(lchown(sticky + "/state", 65534, 65534) == 0)
        do {
            _ = try GrantBroker(state: StateDirectory(path: state))
            Issue.record("a link another user made in a sticky folder was followed")
        } catch {
            #expect("\(error)".contains("\(sticky)/state is a link in the shared folder \(sticky), made by uid 65534"), "\(error)")
        }
    }

    @Test(.enabled(if: isRoot, "lchown needs root"), arguments: ["state path", "link target"])
    func aSlashBeforeACombiningMarkStillSeparatesNames(where place: String) throws {
        // "/" then U+0301 is one Character: split by Character, "state/\u{301}x"
        // stayed one name, and opening it followed the link `state`, which
        // another user made in a sticky folder, without the check above.
        let home = Home()
        let sticky = home.path + "/sticky"
        let real = home.path + "/real"
        for folder in [sticky, real] { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) }
        #expect(chmod(sticky, 0o1777) == 0)
        try FileManager.default.createSymbolicLink(atPath: sticky + "/state", withDestinationPath: real)
        #expect(lchown(sticky + "/state", 65534, 65534) == 0)
        var state = sticky + "/state/\u{301}x"
        if place == "link target" {
            // The user's own link, in their own folder, whose target holds the same trap.
            try FileManager.default.createSymbolicLink(atPath: home.path + "/mine", withDestinationPath: state)
            state = home.path + "/mine"
        }
        do {
            _ = try GrantBroker(state: StateDirectory(path: state + "/sandboxed-run"))
            Issue.record("a link another user made in a sticky folder was followed")
        } catch {
            #expect("\(error)".contains("\(sticky)/state is a link in the shared folder \(sticky), made by uid 65534"), "\(error)")
        }
        #expect(!FileManager.default.fileExists(atPath: real + "/\u{301}x"), "nothing was made through the link")
    }

    @Test(.enabled(if: isRoot, "mounting needs root"))
    func aStateOnAReadOnlyMountServesReadsAndSaysWhyItCannotWrite() throws {
        // Root passes every permission check: a read-only bind mount is what stops it.
        let home = Home()
        let issued = try home.broker().grant(app: memo, folder: try home.folder("vault"), access: .readWrite)
        try #require(mount(home.statePath, home.statePath, nil, UInt(MS_BIND), nil) == 0)
        defer { umount2(home.statePath, Int32(MNT_DETACH)) }
        try #require(mount(nil, home.statePath, nil, UInt(MS_REMOUNT | MS_BIND | MS_RDONLY), nil) == 0)
        let broker = try home.broker()
        #expect(try broker.resolve(issued.bookmark, app: memo).status == .fresh)
        #expect(try broker.list().count == 1)
        #expect(throws: GrantError.readOnlyState(path: home.statePath, needed: "this command")) {
            try broker.grant(app: memo, folder: try home.folder("other"), access: .readWrite)
        }
    }

    @Test func aLinkInPlaceOfTheLedgersCompanionFilesIsRefused() throws {
        let home = Home()
        try populated(home)
        let target = home.path + "/user/target"
        try "scratch\n".write(toFile: target, atomically: false, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: home.statePath + "/ledger.sqlite-wal", withDestinationPath: target)
        expectRefused(home, naming: home.statePath + "/ledger.sqlite-wal", saying: ["is a symbolic link"])
        #expect(try String(contentsOfFile: target, encoding: .utf8) == "scratch\n")
    }
}
