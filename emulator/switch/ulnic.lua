-- Wireshark/tshark dissector for ulnic fabric packets, as ulnic-switch
-- captures them (pcap link type DLT_USER0 = 147). Layout:
-- shared/include/ulnic/abi/fabric.h (struct WireHeader, little-endian).
--   tshark -X lua_script:emulator/switch/ulnic.lua -r capture.pcap
local p = Proto("ulnic", "ulnic fabric packet")

local types = { [1] = "DATA", [2] = "ACK" }
local ops = { [0] = "none", [1] = "PUT", [2] = "RESULT", [3] = "SEND", [4] = "MAIL", [5] = "VI_SEND",
              [6] = "VI_WRITE", [7] = "VI_READ_REQ", [8] = "VI_READ_RESP", [9] = "VI_CONN", [10] = "AM",
              [11] = "UNET", [12] = "OK_THROUGH" }

local f = p.fields
f.magic = ProtoField.uint32("ulnic.magic", "Magic", base.HEX)
f.type = ProtoField.uint8("ulnic.type", "Type", base.DEC, types)
f.flags = ProtoField.uint8("ulnic.flags", "Flags", base.HEX)
-- kWireAckOk: the ack is an OK verdict too (on an ACK, once the sender's data through seq is delivered)
f.ack_ok = ProtoField.bool("ulnic.ack_ok", "ACK says OK", 8, nil, 0x80)
f.len = ProtoField.uint16("ulnic.len", "Payload length", base.DEC)
f.src = ProtoField.uint16("ulnic.src", "Source NIC", base.DEC)
f.dst = ProtoField.uint16("ulnic.dst", "Destination NIC", base.DEC)
f.seq = ProtoField.uint32("ulnic.seq", "Sequence", base.DEC)
f.ack = ProtoField.uint32("ulnic.ack", "Cumulative ACK", base.DEC)
f.csum = ProtoField.uint32("ulnic.checksum", "Checksum (CRC-32C of header and payload sums)", base.HEX)
f.op = ProtoField.uint8("ulnic.op", "Operation", base.DEC, ops)
f.status = ProtoField.uint8("ulnic.status", "Status", base.DEC)
f.dst_slot = ProtoField.uint16("ulnic.dst_slot", "Destination slot", base.DEC)
f.dst_key = ProtoField.uint32("ulnic.dst_key", "Destination key", base.HEX)
f.dst_addr = ProtoField.uint64("ulnic.dst_addr", "Destination address", base.HEX)
f.sack = ProtoField.uint64("ulnic.sack", "Selective ACK (bit i: the receiver holds seq ack + 2 + i)", base.HEX)
f.op_id = ProtoField.uint64("ulnic.op_id", "Operation id", base.HEX)
f.src_inc = ProtoField.uint32("ulnic.src_incarnation", "Source incarnation", base.HEX)
f.dst_inc = ProtoField.uint32("ulnic.dst_incarnation", "Destination incarnation", base.HEX)
f.op_len = ProtoField.uint32("ulnic.op_length", "Operation length", base.DEC)
f.payload = ProtoField.bytes("ulnic.payload", "Payload")

function p.dissector(buf, pinfo, tree)
  if buf:len() < 64 then return 0 end
  pinfo.cols.protocol = "ulnic"
  local t = tree:add(p, buf(0, 64), "ulnic fabric packet")
  t:add_le(f.magic, buf(0, 4))
  t:add_le(f.type, buf(4, 1))
  t:add_le(f.flags, buf(5, 1))
  t:add(f.ack_ok, buf(5, 1))
  t:add_le(f.len, buf(6, 2))
  t:add_le(f.src, buf(8, 2))
  t:add_le(f.dst, buf(10, 2))
  t:add_le(f.seq, buf(12, 4))
  t:add_le(f.ack, buf(16, 4))
  t:add_le(f.csum, buf(20, 4))
  t:add_le(f.op, buf(24, 1))
  t:add_le(f.status, buf(25, 1))
  t:add_le(f.dst_slot, buf(26, 2))
  t:add_le(f.dst_key, buf(28, 4))
  local is_ack = buf(4, 1):le_uint() == 2
  t:add_le(is_ack and f.sack or f.dst_addr, buf(32, 8))
  t:add_le(f.op_id, buf(40, 8))
  t:add_le(f.src_inc, buf(48, 4))
  t:add_le(f.dst_inc, buf(52, 4))
  t:add_le(f.op_len, buf(56, 4))
  if buf:len() > 64 then t:add(f.payload, buf(64)) end
  local typ = types[buf(4, 1):le_uint()] or "?"
  pinfo.cols.src = "nic" .. buf(8, 2):le_uint()
  pinfo.cols.dst = "nic" .. buf(10, 2):le_uint()
  if is_ack then
    local ok = ""
    if buf(5, 1):bitfield(0, 1) == 1 then ok = string.format(" OK after seq=%u", buf(12, 4):le_uint()) end
    pinfo.cols.info = string.format("ACK ack=%u sack=0x%x%s", buf(16, 4):le_uint(), buf(32, 8):le_uint64():tonumber(), ok)
  else
    pinfo.cols.info = string.format("%s seq=%u ack=%u len=%u %s", typ, buf(12, 4):le_uint(), buf(16, 4):le_uint(),
      buf(6, 2):le_uint(), ops[buf(24, 1):le_uint()] or "")
  end
  return buf:len()
end

DissectorTable.get("wtap_encap"):add(wtap.USER0, p)
