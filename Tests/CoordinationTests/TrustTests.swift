import CSyscalls
import Foundation
import SystemPackage
import Testing
@testable import Coordination

/// Attack round 21: what another user can put at the protocol's names, ACLs,
/// the hashed stem's other owner, and the coordination commands' options.

let rootWithSetpriv = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")

/// A scratch folder uid 65534 can reach, with a shared folder in it that
/// anyone may create names in (sticky, like /tmp): the setting where another
/// user can put files beside a note they may not write.
final class SharedFolder {
    let scratch = Scratch()
    var path: String { scratch.path + "/shared" }
    init() {
        chmod(scratch.path, 0o755)
        mkdir(scratch.path + "/shared", 0o755)
        chmod(scratch.path + "/shared", 0o1777)
    }
    func lines(_ name: String) -> [String] { scratch.lines("shared/" + name) }
    /// Python run as uid 65534, with the shared folder as sys.argv[1].
    func asNobody(_ python: String, _ arguments: [String] = []) throws -> (status: Int32, output: String, error: String) {
        try shell("exec /usr/bin/python3 -c \"$1\" \"$2\" \"$@\"", [python, path] + arguments, user: "65534")
    }
    func exists(_ name: String) -> Bool {
        var status = stat()
        return lstat(path + "/" + name, &status) == 0
    }
}

/// POSIX ACLs as the kernel stores them (`system.posix_acl_*`), set and read
/// through descriptors, for tests on a filesystem that keeps them.
enum ACLs {
    static let access = "system.posix_acl_access", defaults = "system.posix_acl_default"
    static let userObj: UInt16 = 0x01, user: UInt16 = 0x02, groupObj: UInt16 = 0x04, mask: UInt16 = 0x10, other: UInt16 = 0x20
    static let unnamed: UInt32 = 0xffff_ffff

    static func encode(_ entries: [(UInt16, UInt16, UInt32)]) -> [UInt8] {
        var bytes: [UInt8] = [2, 0, 0, 0]
        for (tag, permissions, id) in entries {
            bytes += [UInt8(tag & 0xff), UInt8(tag >> 8), UInt8(permissions), 0]
            bytes += (0..<4).map { UInt8(truncatingIfNeeded: id >> (8 * $0)) }
        }
        return bytes
    }

    private static func open(_ path: String) -> CInt {
        Glibc.open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
    }

    @discardableResult
    static func set(_ path: String, _ name: String, _ value: [UInt8]) -> Bool {
        let fd = open(path)
        defer { close(fd) }
        return fd >= 0 && value.withUnsafeBytes { csb_setxattr_fd(fd, name, $0.baseAddress, $0.count, 0) } == 0
    }

    /// The attribute's bytes; nil when the file has none.
    static func get(_ path: String, _ name: String) -> [UInt8]? {
        let fd = open(path)
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 4096)
        let count = bytes.withUnsafeMutableBytes { csb_getxattr_fd(fd, name, $0.baseAddress, $0.count) }
        return count > 0 ? Array(bytes.prefix(count)) : nil
    }

    static func remove(_ path: String, _ name: String) {
        let fd = open(path)
        defer { close(fd) }
        _ = csb_removexattr_fd(fd, name)
    }

    /// Whether the test's scratch filesystem keeps POSIX ACLs (ext4 and tmpfs do).
    static let supported: Bool = {
        let scratch = Scratch()
        let file = scratch.path + "/probe"
        _ = FileManager.default.createFile(atPath: file, contents: nil)
        let acl = encode([(userObj, 6, unnamed), (user, 4, 1234), (groupObj, 0, unnamed), (mask, 4, unnamed), (other, 0, unnamed)])
        return set(file, access, acl) && get(file, access) == acl
    }()
}

/// Whether uid 65534 (in no group but its own) can read `path`.
func nobodyReads(_ path: String) throws -> Bool {
    try shell("exec cat \"$1\" >/dev/null 2>&1", [path], user: "65534").status == 0
}

/// §1: a journal, a staged journal, a copy, a stub or a temporary that
/// another user put beside a note they may not write is neither believed
/// nor acted on.
@Suite struct ForeignFilesBesideANoteTests {
    static let plantTornJournal = """
        import os, sys
        d = sys.argv[1]
        content = open(os.path.join(d, "notes"), "rb").read()
        try:
            open(os.path.join(d, "notes"), "ab"); print("can write notes")
        except PermissionError:
            pass
        record = content + b"x"
        open(os.path.join(d, ".notes.sr-journal"), "wb").write(b"sandboxed-run journal 2\\n0 %d\\n" % len(record) + record)
        """

    @Test(.enabled(if: rootWithSetpriv, "needs root to set up, setpriv to plant as another user"))
    func aJournalAnotherUserPlantedTruncatesNothing() throws {
        let shared = SharedFolder()
        let note = shared.path + "/notes"
        for i in 1...3 { #expect(try shell("\"$0\" append \"$1\" \"$2\"", [note, "acknowledged line \(i)"]).status == 0) }
        #expect(chmod(note, 0o644) == 0)
        let before = shared.lines("notes")
        let planted = try shared.asNobody(Self.plantTornJournal)
        #expect(planted.status == 0 && planted.output.isEmpty, "\(planted)")
        // The note's owner appends: refused, nothing cut, the journal left for a person.
        let appended = try shell("\"$0\" append \"$1\" 'new line'", [note])
        #expect(appended.status == 125, "\(appended)")
        #expect(appended.error.contains("uid 65534"), "\(appended.error)")
        #expect(shared.lines("notes") == before)
        #expect(shared.exists(".notes.sr-journal"))
        // The sync simulator (root) evicting, editing, uploading: the same.
        let simulator = try shell("\"$0\" sync-simulator \"$1\" --seconds 1.5 --edit-rate 20 --evict-rate 50 --conflict-rate 20 --seed 3", [shared.path])
        #expect(simulator.status == 0)
        #expect(simulator.error.contains(".notes.sr-journal"), "not reported: \(simulator.error)")
        #expect(shared.lines("notes") == before)
        // A reader is refused too: it cannot tell a torn record from a planted journal.
        #expect(try shell("\"$0\" coordinate --read \"$1\" -- /bin/true", [note]).status == 125)
    }

    /// Journals whose owner may write the item, but which others could have
    /// written: writable by others, or a hard link to a file that has another name.
    @Test func journalsOthersCouldHaveWrittenAreRefused() throws {
        let scratch = Scratch()
        let note = scratch.path + "/notes"
        try "whole line\n".write(toFile: note, atomically: false, encoding: .utf8)
        let torn = "sandboxed-run journal 2\n0 12\nwhole line\nx"
        let journal = scratch.path + "/.notes.sr-journal"
        // Writable by others.
        try torn.write(toFile: journal, atomically: false, encoding: .utf8)
        #expect(chmod(journal, 0o666) == 0)
        let open = try shell("\"$0\" append \"$1\" x", [note])
        #expect(open.status == 125, "\(open)")
        #expect(open.error.contains("may be written by others"), "\(open.error)")
        #expect(scratch.lines("notes") == ["whole line", ""])
        // A second name: whoever holds the other one can write it.
        #expect(unlink(journal) == 0)
        try torn.write(toFile: scratch.path + "/elsewhere", atomically: false, encoding: .utf8)
        #expect(chmod(scratch.path + "/elsewhere", 0o600) == 0)
        #expect(link(scratch.path + "/elsewhere", journal) == 0)
        let linked = try shell("\"$0\" append \"$1\" x", [note])
        #expect(linked.status == 125, "\(linked)")
        #expect(linked.error.contains("2 links"), "\(linked.error)")
        #expect(scratch.lines("notes") == ["whole line", ""])
    }

    /// The rule keeps what it must: the note's owner's own journal (another
    /// user than root) still rolls back a torn record when root appends.
    @Test(.enabled(if: getuid() == 0, "needs root to make files another user's"))
    func theItemOwnersJournalIsStillRecovered() throws {
        let scratch = Scratch()
        let note = scratch.path + "/notes", journal = scratch.path + "/.notes.sr-journal"
        try "whole line\ntor".write(toFile: note, atomically: false, encoding: .utf8)
        try "sandboxed-run journal 2\n11 5\ntorn\n".write(toFile: journal, atomically: false, encoding: .utf8)
        #expect(chmod(journal, 0o600) == 0 && chown(journal, 65534, 65534) == 0 && chown(note, 65534, 65534) == 0)
        #expect(try shell("\"$0\" append \"$1\" after", [note]).status == 0)
        #expect(scratch.lines("notes") == ["whole line", "after", ""])
        #expect(!FileManager.default.fileExists(atPath: journal))
    }

    /// A journal is staged as `.NAME.sr-journal.new`: another user's file at
    /// that name is neither written through (O_TRUNC would keep its owner and
    /// their open descriptors) nor removed.
    @Test(.enabled(if: rootWithSetpriv, "needs root to set up, setpriv to plant as another user"))
    func aStagedJournalAnotherUserPlantedIsNeitherWrittenNorRemoved() throws {
        let shared = SharedFolder()
        let note = shared.path + "/notes"
        try (String(repeating: "a", count: 4000) + "\n").write(toFile: note, atomically: false, encoding: .utf8)
        #expect(chmod(note, 0o644) == 0)
        let planted = try shared.asNobody("import os, sys; open(os.path.join(sys.argv[1], '.notes.sr-journal.new'), 'w').write('mine\\n')")
        #expect(planted.status == 0, "\(planted)")
        // A record that crosses the page boundary: it is journaled.
        let appended = try shell("\"$0\" append \"$1\" \"$2\"", [note, String(repeating: "r", count: 300)])
        #expect(appended.status == 125, "\(appended)")
        #expect(appended.error.contains(".notes.sr-journal.new") && appended.error.contains("uid 65534"), "\(appended.error)")
        #expect(shared.lines(".notes.sr-journal.new") == ["mine", ""])
        #expect(shared.lines("notes").count == 2)
    }

    /// Root appending to another user's note gives its journal to that user,
    /// so that the note's owner can recover it when root's append was killed.
    @Test(.enabled(if: rootWithSetpriv && DurabilityTests.strace, "needs root, setpriv and strace (scripts/install-deps)"))
    func aJournalRootLeavesOnAnotherUsersNoteIsTheirsToRecover() throws {
        let scratch = Scratch()
        #expect(chmod(scratch.path, 0o755) == 0)
        let note = scratch.path + "/notes"
        try (String(repeating: "a", count: 4000) + "\n").write(toFile: note, atomically: false, encoding: .utf8)
        #expect(chown(note, 65534, 65534) == 0 && chown(scratch.path, 65534, 65534) == 0)
        // Killed as it starts the record's write: the journal is in place, the record not.
        let (killed, _) = try Party.run(["/usr/bin/strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=write", "-e", "inject=write:signal=KILL:when=2",
                                        Party.binary, "append", note, String(repeating: "r", count: 300)])
        #expect(killed.terminationStatus != 0)
        #expect(owner(scratch.path + "/.notes.sr-journal") == 65534, "root's journal kept root as owner: the note's owner would be refused")
        let theirs = try shell("\"$0\" append \"$1\" theirs", [note], user: "65534")
        #expect(theirs.status == 0, "\(theirs)")
        #expect(scratch.lines("notes").suffix(2) == ["theirs", ""])
        #expect(!FileManager.default.fileExists(atPath: scratch.path + "/.notes.sr-journal"))
    }

    /// Another user's copy beside root's note would become one of its versions
    /// (and, newest, the note when versions are resolved); beside root's stub,
    /// the note itself; their temporary would be removed.
    @Test(.enabled(if: rootWithSetpriv, "needs root to set up, setpriv to plant as another user"))
    func copiesAndTemporariesAnotherUserPlantedAreLeftAlone() throws {
        let shared = SharedFolder()
        let note = shared.path + "/notes"
        try "root's note\n".write(toFile: note, atomically: false, encoding: .utf8)
        #expect(chmod(note, 0o640) == 0)
        // `gone` is evicted and its copy lost: only root's stub is left.
        let stub = Placeholder.encode(.init(name: "gone", size: 5))
        _ = FileManager.default.createFile(atPath: shared.path + "/.gone.icloud", contents: Data(stub))
        #expect(chmod(shared.path + "/.gone.icloud", 0o644) == 0)
        let planted = try shared.asNobody("""
            import os, sys
            d = sys.argv[1]
            for name, text in [(".notes.icloud.data", "attacker's, newest\\n"), (".gone.icloud.data", "attacker's\\n"), (".notes.sr-0123456789abcdef", "attacker's\\n")]:
                path = os.path.join(d, name)
                open(path, "w").write(text)
                os.utime(path, (4000000000, 4000000000))
            """)
        #expect(planted.status == 0, "\(planted)")
        let simulator = try shell("\"$0\" sync-simulator \"$1\" --seconds 1 --edit-rate 0", [shared.path])
        #expect(simulator.status == 0)
        for name in [".notes.icloud.data", ".gone.icloud.data", ".notes.sr-0123456789abcdef"] {
            #expect(shared.exists(name), "\(name) was acted on")
            #expect(simulator.error.contains(name), "\(name) not reported: \(simulator.error)")
        }
        #expect(!shared.exists(".sandboxed-run-versions"), "another user's file became a version of root's note")
        #expect(!shared.exists("gone"), "another user's file became root's evicted note")
        #expect(try shell("\"$0\" versions resolve \"$1\"", [note]).status == 0)
        #expect(shared.lines("notes") == ["root's note", ""])
    }
}

extension ForeignFilesBesideANoteTests {
    /// While root's note is evicted, another user makes a file of their own at its
    /// name: root's copy must not become a conflict version of that file, kept in a
    /// versions folder that user would own (and could empty).
    @Test(.enabled(if: rootWithSetpriv, "needs root to set up, setpriv to act as another user"))
    func anotherUsersFileAtAnEvictedNotesNameDoesNotTakeItsCopy() throws {
        let shared = SharedFolder()
        let note = shared.path + "/notes"
        try "root's evicted note\n".write(toFile: note, atomically: false, encoding: .utf8)
        #expect(chmod(note, 0o600) == 0)
        #expect(try shell("\"$0\" sync-simulator \"$1\" --seconds 0.4 --edit-rate 0 --evict-rate 1000 --leave-placeholders", [shared.path]).status == 0)
        #expect(!shared.exists("notes") && shared.exists(".notes.icloud.data"))
        #expect(try shared.asNobody("import os, sys; open(os.path.join(sys.argv[1], 'notes'), 'w').write('mine\\n')").status == 0)
        let simulator = try shell("\"$0\" sync-simulator \"$1\" --seconds 0.5 --edit-rate 0 --leave-placeholders", [shared.path])
        #expect(simulator.error.contains("uid 65534"), "not reported: \(simulator.error)")
        #expect(shared.lines(".notes.icloud.data") == ["root's evicted note", ""])
        #expect(!shared.exists(".sandboxed-run-versions"), "root's note became a version of another user's file")
    }

    /// An unprivileged daemon evicts a note it may write but not give away (root's, in
    /// its own vault): its stub is its own, the copy root's; the stub records the
    /// item's owner, so the copy still comes back.
    @Test(.enabled(if: rootWithSetpriv, "needs root to set up, setpriv to drop"))
    func anUnprivilegedDaemonBringsBackANoteItCouldNotOwn() throws {
        let scratch = Scratch()
        let vault = scratch.path + "/vault"
        #expect(chmod(scratch.path, 0o755) == 0 && mkdir(vault, 0o755) == 0 && chown(vault, 65534, 65534) == 0)
        try "root's\n".write(toFile: vault + "/n.md", atomically: false, encoding: .utf8)
        #expect(chmod(vault + "/n.md", 0o666) == 0)
        let evicted = try shell("\"$0\" sync-simulator \"$1\" --seconds 0.4 --edit-rate 0 --evict-rate 1000 --leave-placeholders", [vault], user: "65534")
        #expect(evicted.status == 0 && !evicted.output.contains("evictions 0,"), "\(evicted)")
        #expect(owner(vault + "/.n.md.icloud") == 65534 && owner(vault + "/.n.md.icloud.data") == 0)
        let back = try shell("\"$0\" sync-simulator \"$1\" --seconds 0.3 --edit-rate 0", [vault], user: "65534")
        #expect(back.status == 0 && back.error.isEmpty, "\(back)")
        #expect(scratch.lines("vault/n.md") == ["root's", ""] && owner(vault + "/n.md") == 0)
    }
}

/// §2: conflict versions go only into versions folders that nobody else made,
/// may write, or gave a default ACL.
@Suite struct VersionsFolderTrustTests {
    @Test(.enabled(if: rootWithSetpriv, "needs root to set up, setpriv to act as another user"))
    func aVersionsFolderAnotherUserMadeIsRefused() throws {
        let shared = SharedFolder()
        let note = shared.path + "/notes"
        for i in 1...3 { #expect(try shell("\"$0\" append \"$1\" \"$2\"", [note, "secret line \(i)"]).status == 0) }
        #expect(chmod(note, 0o640) == 0)
        let made = try shared.asNobody("""
            import os, sys, struct
            v = os.path.join(sys.argv[1], ".sandboxed-run-versions"); os.mkdir(v); os.chmod(v, 0o777)
            n = os.path.join(v, "notes"); os.mkdir(n); os.chmod(n, 0o777)
            try:
                acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, i) for t, p, i in
                      [(1, 7, 0xffffffff), (2, 7, 65534), (4, 7, 0xffffffff), (0x10, 7, 0xffffffff), (0x20, 7, 0xffffffff)])
                os.setxattr(n, "system.posix_acl_default", acl)
            except OSError:
                pass
            """)
        #expect(made.status == 0, "\(made)")
        let simulator = try shell("\"$0\" sync-simulator \"$1\" --seconds 1.5 --edit-rate 0 --conflict-rate 20 --seed 7", [shared.path])
        #expect(simulator.status == 0)
        #expect(simulator.error.contains(".sandboxed-run-versions") && simulator.error.contains("uid 65534"), "not reported: \(simulator.error)")
        let kept = try FileManager.default.contentsOfDirectory(atPath: shared.path + "/.sandboxed-run-versions/notes")
        #expect(kept.isEmpty, "versions of root's 0640 note kept where uid 65534 reads them: \(kept)")
        let listed = try shell("\"$0\" versions list \"$1\"", [note])
        #expect(listed.status == 125 && listed.error.contains("uid 65534"), "\(listed)")
        #expect(shared.lines("notes").prefix(3) == ["secret line 1", "secret line 2", "secret line 3"])
    }

    /// Root's own folders are refused too when others may write them or they have a default ACL.
    @Test func versionsFoldersOthersMayWriteAreRefused() throws {
        let scratch = Scratch()
        #expect(chmod(scratch.path, 0o755) == 0)
        let note = scratch.path + "/notes"
        try "mine\n".write(toFile: note, atomically: false, encoding: .utf8)
        let versions = scratch.path + "/.sandboxed-run-versions/notes"
        try FileManager.default.createDirectory(atPath: versions, withIntermediateDirectories: true)
        #expect(chmod(versions, 0o777) == 0)
        let listed = try shell("\"$0\" versions list \"$1\"", [note])
        #expect(listed.status == 125 && listed.error.contains("may be written by others"), "\(listed)")
        #expect(throws: (any Error).self) {
            try FileVersion.add(to: FilePath(note), contents: Array("v\n".utf8), modified: timespec(tv_sec: 1, tv_nsec: 0), savingComputer: "x")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: versions).isEmpty)
        #expect(chmod(versions, 0o700) == 0)
        try FileVersion.add(to: FilePath(note), contents: Array("v\n".utf8), modified: timespec(tv_sec: 1, tv_nsec: 0), savingComputer: "x")
        #expect(try FileVersion.unresolvedConflictVersions(of: FilePath(note)).count == 1)
    }

    @Test(.enabled(if: ACLs.supported, "needs a scratch filesystem that keeps POSIX ACLs"))
    func aVersionsFolderWithADefaultACLIsRefused() throws {
        let scratch = Scratch()
        let note = scratch.path + "/notes"
        try "mine\n".write(toFile: note, atomically: false, encoding: .utf8)
        let versions = scratch.path + "/.sandboxed-run-versions/notes"
        try FileManager.default.createDirectory(atPath: versions, withIntermediateDirectories: true)
        #expect(chmod(versions, 0o700) == 0)
        #expect(ACLs.set(versions, ACLs.defaults, ACLs.encode([(ACLs.userObj, 7, ACLs.unnamed), (ACLs.user, 5, 65534), (ACLs.groupObj, 0, ACLs.unnamed),
                                                                 (ACLs.mask, 5, ACLs.unnamed), (ACLs.other, 0, ACLs.unnamed)])))
        let listed = try shell("\"$0\" versions list \"$1\"", [note])
        #expect(listed.status == 125 && listed.error.contains("default ACL"), "\(listed)")
        let conflicts = try shell("\"$0\" sync-simulator \"$1\" --seconds 0.6 --edit-rate 0 --conflict-rate 50", [scratch.path])
        #expect(conflicts.error.contains("default ACL"), "\(conflicts.error)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: versions).isEmpty)
    }

    /// In a shared folder root's simulator keeps a 65534 note's versions in
    /// folders 65534 can use: the top one is the shared folder's owner's.
    /// A file another user put in a versions folder is not a version.
    @Test(.enabled(if: rootWithSetpriv, "needs root to set up, setpriv to act as another user"))
    func theOwnersVersionsWorkAndOnlyTheirs() throws {
        let shared = SharedFolder()
        let note = shared.path + "/theirs"
        #expect(try shell("\"$0\" append \"$1\" 'their line'", [note], user: "65534").status == 0)
        let simulator = try shell("\"$0\" sync-simulator \"$1\" --seconds 0.6 --edit-rate 0 --conflict-rate 50", [shared.path])
        #expect(simulator.status == 0 && !simulator.output.contains("conflicts 0,"), "\(simulator)")
        let listed = try shell("\"$0\" versions list \"$1\"", [note], user: "65534")
        #expect(listed.status == 0 && !listed.output.isEmpty, "\(listed)")
        // A file at a version's name that root (neither the note's owner nor uid 65534) made and others may write.
        let folder = shared.path + "/.sandboxed-run-versions/theirs"
        #expect(chmod(folder, 0o1777) == 0)  // as open as the shared folder: allowed, but then each file is checked
        try "planted, newest\n".write(toFile: folder + "/4000000000.000000000-remote", atomically: false, encoding: .utf8)
        #expect(chmod(folder + "/4000000000.000000000-remote", 0o666) == 0)
        let again = try shell("\"$0\" versions list \"$1\"", [note], user: "65534")
        #expect(again.status == 0 && !again.output.contains("4000000000"), "\(again)")
        #expect(try shell("\"$0\" versions resolve \"$1\"", [note], user: "65534").status == 0)
        #expect(shared.lines("theirs").first.map { $0 != "planted, newest" } ?? false)
    }
}

/// §3: copies (replacements, stubs, conflict versions, their folders) are
/// never more readable than the original through ACLs.
@Suite struct CopiesKeepTheOriginalsACLTests {
    static let noteACL = ACLs.encode([(ACLs.userObj, 6, ACLs.unnamed), (ACLs.user, 6, 1234), (ACLs.groupObj, 0, ACLs.unnamed),
                                      (ACLs.mask, 6, ACLs.unnamed), (ACLs.other, 0, ACLs.unnamed)])

    /// group::--- with mask::rw- shows as st_mode 0660: a copy of st_mode opened the note to its group.
    @Test(.enabled(if: ACLs.supported && rootWithSetpriv, "needs ACLs on the scratch filesystem, root and setpriv"))
    func copiesOfANoteWithAnAccessACLGetThatACL() throws {
        let scratch = Scratch()
        #expect(chmod(scratch.path, 0o755) == 0)
        let note = scratch.path + "/notes"
        for i in 1...3 { #expect(try shell("\"$0\" append \"$1\" \"$2\"", [note, "secret line \(i)"]).status == 0) }
        #expect(chown(note, 0, 65534) == 0 && chmod(note, 0o600) == 0 && ACLs.set(note, ACLs.access, Self.noteACL))
        #expect(try !nobodyReads(note))
        let simulator = try shell("\"$0\" sync-simulator \"$1\" --seconds 1 --edit-rate 10 --conflict-rate 10 --seed 11", [scratch.path])
        #expect(simulator.status == 0 && !simulator.output.contains("edits 0,") && !simulator.output.contains("conflicts 0,"), "\(simulator)")
        #expect(ACLs.get(note, ACLs.access) == Self.noteACL, "the edited note lost its ACL")
        #expect(try !nobodyReads(note), "its group reads the note after a remote edit")
        let versions = scratch.path + "/.sandboxed-run-versions/notes"
        for version in try FileManager.default.contentsOfDirectory(atPath: versions) {
            #expect(ACLs.get(versions + "/" + version, ACLs.access) == Self.noteACL, "\(version)")
            #expect(try !nobodyReads(versions + "/" + version), "\(version)")
        }
        // The versions folder: who may read the note may list it; its group may not.
        let folderACL = ACLs.encode([(ACLs.userObj, 7, ACLs.unnamed), (ACLs.user, 5, 1234), (ACLs.groupObj, 0, ACLs.unnamed),
                                     (ACLs.mask, 5, ACLs.unnamed), (ACLs.other, 0, ACLs.unnamed)])
        #expect(ACLs.get(versions, ACLs.access) == folderACL)
        // The library's replacing writer, and an eviction's stub.
        let replaced = try shell("\"$0\" coordinate --write \"$1\" --intent replacing -- /bin/sh -c 'echo edited > \"$COORDINATED_PATH\"'", [note])
        #expect(replaced.status == 0, "\(replaced)")
        #expect(ACLs.get(note, ACLs.access) == Self.noteACL)
        #expect(try !nobodyReads(note))
        #expect(try shell("\"$0\" sync-simulator \"$1\" --seconds 0.4 --edit-rate 0 --evict-rate 1000 --leave-placeholders", [scratch.path]).status == 0)
        #expect(ACLs.get(scratch.path + "/.notes.icloud", ACLs.access) == Self.noteACL)
        #expect(try !nobodyReads(scratch.path + "/.notes.icloud"))
    }

    /// A file made in a folder with a default ACL inherits it: a remote edit's
    /// replacement re-granted what the note's owner had removed.
    @Test(.enabled(if: ACLs.supported && rootWithSetpriv, "needs ACLs on the scratch filesystem, root and setpriv"))
    func copiesMadeInAFolderWithADefaultACLDoNotInheritIt() throws {
        let scratch = Scratch()
        #expect(chmod(scratch.path, 0o755) == 0)
        let vault = scratch.path + "/vault"
        #expect(mkdir(vault, 0o755) == 0)
        #expect(ACLs.set(vault, ACLs.defaults, ACLs.encode([(ACLs.userObj, 7, ACLs.unnamed), (ACLs.user, 5, 65534), (ACLs.groupObj, 5, ACLs.unnamed),
                                                              (ACLs.mask, 5, ACLs.unnamed), (ACLs.other, 0, ACLs.unnamed)])))
        let note = vault + "/private"
        for i in 1...3 { #expect(try shell("\"$0\" append \"$1\" \"$2\"", [note, "not for uid 65534: \(i)"]).status == 0) }
        ACLs.remove(note, ACLs.access)  // setfacl -b
        #expect(chmod(note, 0o640) == 0 && ACLs.get(note, ACLs.access) == nil)
        #expect(try !nobodyReads(note))
        let simulator = try shell("\"$0\" sync-simulator \"$1\" --seconds 1 --edit-rate 10 --conflict-rate 10 --seed 2", [vault])
        #expect(simulator.status == 0 && !simulator.output.contains("edits 0,") && !simulator.output.contains("conflicts 0,"), "\(simulator)")
        #expect(ACLs.get(note, ACLs.access) == nil && mode(note) == 0o640)
        #expect(try !nobodyReads(note), "a remote edit re-granted uid 65534 the note")
        let top = vault + "/.sandboxed-run-versions", versions = top + "/private"
        for folder in [top, versions] {
            #expect(ACLs.get(folder, ACLs.defaults) == nil && ACLs.get(folder, ACLs.access) == nil, "\(folder) kept an inherited ACL")
        }
        for version in try FileManager.default.contentsOfDirectory(atPath: versions) {
            #expect(ACLs.get(versions + "/" + version, ACLs.access) == nil)
            #expect(try !nobodyReads(versions + "/" + version), "\(version)")
        }
        let replaced = try shell("\"$0\" coordinate --write \"$1\" --intent replacing -- /bin/sh -c 'echo edited > \"$COORDINATED_PATH\"'", [note])
        #expect(replaced.status == 0 && ACLs.get(note, ACLs.access) == nil)
        #expect(try !nobodyReads(note))
        #expect(try shell("\"$0\" sync-simulator \"$1\" --seconds 0.4 --edit-rate 0 --evict-rate 1000 --leave-placeholders", [vault]).status == 0)
        #expect(ACLs.get(vault + "/.private.icloud", ACLs.access) == nil)
        #expect(try !nobodyReads(vault + "/.private.icloud"))
    }
}

/// §4: the hashed stem `.sr2-<hash>` is also the readable stem of the short
/// name `sr2-<hash>`: only the stub's own name says whose the stub and copy are.
@Suite struct HashedStemOwnerTests {
    static let long = String(repeating: "L", count: 240)
    static var short: String {
        "sr2-" + SHA256.hash(Array(long.utf8)).prefix(16).map { String(format: "%02x", $0) }.joined()
    }

    @Test func anEvictedLongNameComesBackBesideTheShortNameOfItsStem() throws {
        let scratch = Scratch()
        let long = scratch.path + "/" + Self.long
        #expect(try shell("\"$0\" append \"$1\" 'line of L'", [long]).status == 0)
        #expect(try shell("\"$0\" sync-simulator \"$1\" --seconds 0.3 --edit-rate 0 --evict-rate 1000 --leave-placeholders", [scratch.path]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: long))
        try "junk\n".write(toFile: scratch.path + "/" + Self.short, atomically: false, encoding: .utf8)
        let simulator = try CLIHome().start(["sync-simulator", scratch.path, "--edit-rate", "0", "--seconds", "3"])
        let appended = try shell("\"$0\" append --download 5 \"$1\" 'second line'", [long])
        simulator.waitUntilExit()
        #expect(appended.status == 0, "\(appended)")
        #expect(scratch.lines(Self.long) == ["line of L", "second line", ""])
        #expect(scratch.lines(Self.short) == ["junk", ""])
        let quiet = try shell("\"$0\" sync-simulator \"$1\" --seconds 0.3 --edit-rate 0", [scratch.path])
        #expect(!quiet.error.contains("not a placeholder stub"), "\(quiet.error)")
    }

    /// A copy with a hashed stem and no stub may be any long name's with that
    /// hash, or the short name's: it is never brought back or kept as a version of a guess.
    @Test func aHashedCopyWithoutItsStubIsLeftAloneAndReported() throws {
        let scratch = Scratch()
        let long = scratch.path + "/" + Self.long
        #expect(try shell("\"$0\" append \"$1\" 'line of L'", [long]).status == 0)
        #expect(try shell("\"$0\" sync-simulator \"$1\" --seconds 0.3 --edit-rate 0 --evict-rate 1000 --leave-placeholders", [scratch.path]).status == 0)
        let stem = "." + Self.short
        #expect(unlink(scratch.path + "/" + stem + ".icloud") == 0)
        let alone = try shell("\"$0\" sync-simulator \"$1\" --seconds 0.3 --edit-rate 0", [scratch.path])
        #expect(alone.error.contains(stem + ".icloud.data") && alone.error.contains("no placeholder stub"), "\(alone.error)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.path) == [stem + ".icloud.data"])
        // Beside the short name whose stem it also is: not a conflict version of it either.
        try "junk\n".write(toFile: scratch.path + "/" + Self.short, atomically: false, encoding: .utf8)
        let beside = try shell("\"$0\" sync-simulator \"$1\" --seconds 0.3 --edit-rate 0", [scratch.path])
        #expect(beside.error.contains("no placeholder stub"), "\(beside.error)")
        #expect(!FileManager.default.fileExists(atPath: scratch.path + "/.sandboxed-run-versions"), "L's copy became a version of \(Self.short)")
        #expect(scratch.lines(stem + ".icloud.data") == ["line of L", ""])
    }
}

/// §5: every option of the coordination commands is taken once, and its numbers are decimal.
@Suite struct CoordinationOptionTests {
    @Test func repeatedOptionsAndNumbersThatAreNotDecimalAreUsageErrors() throws {
        let scratch = Scratch()
        let note = scratch.path + "/note.md"
        let repeated: [([String], String)] = [
            (["append", note, "x", "--timeout", "1", "--timeout", "2"], "--timeout"), (["append", "--timeout=1", "--timeout", "1", note, "x"], "--timeout"),
            (["append", "--download", "0", "--download", "0", note, "x"], "--download"),
            (["coordinate", "--read", note, "--read", note, "--", "/bin/true"], "--read"),
            (["coordinate", "--write", note, "--intent", "merging", "--intent", "replacing", "--", "/bin/true"], "--intent"),
            (["coordinate", "--timeout", "1", "--timeout", "1", "--write", note, "--", "/bin/true"], "--timeout"),
            (["sync-simulator", scratch.path, "--seconds", "0", "--seconds", "0"], "--seconds"),
            (["sync-simulator", scratch.path, "--seconds", "0", "--seed", "1", "--seed", "2"], "--seed"),
            (["sync-simulator", scratch.path, "--seconds", "0", "--edit-rate", "1", "--edit-rate", "1"], "--edit-rate"),
            (["versions", "list", note, "--keep", "current", "--keep", "newest"], "--keep"),
        ]
        for (arguments, option) in repeated {
            let result = try shell("exec \"$0\" \"$@\"", arguments)
            #expect(result.status == 125, "\(arguments): \(result.status)")
            #expect(result.error.contains("\(option) was given 2 times"), "\(arguments): \(result.error)")
        }
        for value in ["-1", "-0.5", "0x10", "1e3", "2.", ".5", "+1", "inf", "nan", "1_0", "", " 1", "１"] {
            let result = try shell("exec \"$0\" append --timeout \"$1\" \"$2\" x", [value, note])
            #expect(result.status == 125, "--timeout \(value): \(result.status)")
            #expect(result.error.contains("from 0 to 1000000"), "--timeout \(value): \(result.error)")
        }
        for (option, value) in [("--edit-rate", "0x10"), ("--evict-rate", "-1"), ("--conflict-rate", "1e2"), ("--seed", "0x10"), ("--seed", "-1")] {
            let result = try shell("exec \"$0\" sync-simulator \"$1\" --seconds 0 \"$2\" \"$3\"", [scratch.path, option, value])
            #expect(result.status == 125, "\(option) \(value): \(result.status)")
            #expect(result.error.contains(option + " " + value + " is not"), "\(option) \(value): \(result.error)")
        }
        #expect(!FileManager.default.fileExists(atPath: note))
        for value in ["0", "7", "0.25", "30.000"] {
            #expect(try shell("exec \"$0\" append --timeout \"$1\" \"$2\" fine", [value, note]).status == 0, "\(value)")
        }
        #expect(try shell("exec \"$0\" sync-simulator \"$1\" --seconds 0.1 --seed 18446744073709551615 --edit-rate 2.5", [scratch.path]).status == 0)
    }
}
